package jobclient_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/surge-run/surge/client/jobclient"
)

type Resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

// A program that submits a job and works it, against `surge serve` on its
// default address.
func Example() {
	ctx := context.Background()
	c := jobclient.New("http://127.0.0.1:8080")

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
}
