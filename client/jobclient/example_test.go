package jobclient_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/server"
)

// serverURL is an in-process `surge serve` that the example runs against.
var serverURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jobclient-example")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ready, errc := make(chan string, 1), make(chan error, 1)
	go func() {
		errc <- server.Run(ctx, server.Config{Addr: "127.0.0.1:0", DataDir: dir, Ready: ready, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case addr := <-ready:
		serverURL = "http://" + addr
	case err := <-errc:
		log.Fatal(err)
	}
	code := m.Run()
	stop()
	if err := <-errc; err != nil {
		log.Print(err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type Resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// A program that submits a job and works it.
func Example() {
	ctx := context.Background()
	c := jobclient.New(serverURL) // e.g. "http://127.0.0.1:8080", where `surge serve` listens

	w := jobclient.NewWorker(c, jobclient.WorkerConfig{Concurrency: 4})
	jobclient.Handle(w, "default", func(ctx context.Context, job *jobclient.Job[Resize]) ([]byte, error) {
		// ctx ends if the job is cancelled or its TTL is up.
		return fmt.Appendf(nil, "%s at %dpx", job.Args.Image, job.Args.Width), nil
	})
	workCtx, drain := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- w.Run(workCtx) }()

	id, err := jobclient.SubmitJSON(ctx, c, "default", Resize{Image: "cat.png", Width: 640},
		jobclient.SubmitOptions{Priority: 5, TTL: time.Minute, IdempotencyKey: "resize cat.png 640"})
	if err != nil {
		log.Fatal(err)
	}
	for {
		job, err := c.Get(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		if job.Status == jobclient.StatusDone {
			fmt.Println(string(job.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	drain() // as on SIGTERM: running jobs finish, then the worker deregisters
	if err := <-stopped; err != nil {
		log.Fatal(err)
	}
	// Output: cat.png at 640px
}
