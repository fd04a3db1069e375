package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/server"
)

// surgeProc is an in-process `surge serve` that a test can stop and start
// again on the same address and data directory.
type surgeProc struct {
	addr, dir string
	stop      context.CancelFunc
	done      chan error
}

func startSurgeServer(t *testing.T, addr, dir string) *surgeProc {
	t.Helper()
	p, err := tryStart(addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.close(t) })
	return p
}

func (p *surgeProc) close(t *testing.T) {
	if p.stop == nil {
		return
	}
	p.stop()
	p.stop = nil
	if err := <-p.done; err != nil {
		t.Errorf("server.Run: %v", err)
	}
}

func (p *surgeProc) url() string { return "http://" + p.addr }

func submitCommand(t *testing.T, c *jobclient.Client, opts jobclient.SubmitOptions, argv ...string) string {
	t.Helper()
	payload := `{"command":["` + strings.Join(argv, `","`) + `"]}`
	id, err := c.Submit(context.Background(), "default", []byte(payload), opts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func waitStatus(t *testing.T, c *jobclient.Client, id string, want ...jobclient.Status) jobclient.JobInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		job, err := c.Get(context.Background(), id)
		if err == nil {
			for _, s := range want {
				if job.Status == s {
					return job
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %v (%v), want %v", id, job.Status, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runCommandWorker runs `surge worker`'s worker; the channel closes when
// Run has returned, and wait gives Run's result (any number of times).
func runCommandWorker(t *testing.T, c *jobclient.Client, cfg jobclient.WorkerConfig) (drain context.CancelFunc, done <-chan struct{}, wait func() error) {
	t.Helper()
	w := newCommandWorker(c, cfg, nil)
	ctx, drain := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	var err error
	go func() { err = w.Run(ctx); close(stopped) }()
	t.Cleanup(func() {
		drain()
		w.StopNow()
		<-stopped
	})
	return drain, stopped, func() error { <-stopped; return err }
}

func TestWorkerCommandsAgainstTheServer(t *testing.T) {
	srv := startSurgeServer(t, "127.0.0.1:0", t.TempDir())
	c := jobclient.New(srv.url())
	drain, done, wait := runCommandWorker(t, c, jobclient.WorkerConfig{ID: "e2e", Concurrency: 4})

	ok := submitCommand(t, c, jobclient.SubmitOptions{}, "echo", "hello")
	if job := waitStatus(t, c, ok, jobclient.StatusDone); string(job.Result) != "hello\n" {
		t.Errorf("echo: result %q", job.Result)
	}

	// One try: a failure then dead-letters at once, with the reason kept.
	fail := submitCommand(t, c, jobclient.SubmitOptions{MaxRetries: 1}, "sh", "-c", "echo boom >&2; exit 3")
	if job := waitStatus(t, c, fail, jobclient.StatusFailed, jobclient.StatusDeadLettered); job.Error != "exit status 3; stderr: boom" {
		t.Errorf("exit 3: error %q", job.Error)
	}

	notCmd, err := c.Submit(context.Background(), "default", []byte(`{"cmd":"ls"}`), jobclient.SubmitOptions{MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if job := waitStatus(t, c, notCmd, jobclient.StatusFailed, jobclient.StatusDeadLettered); !strings.Contains(job.Error, "no command") {
		t.Errorf("bad payload: error %q", job.Error)
	}

	start := time.Now()
	slow := submitCommand(t, c, jobclient.SubmitOptions{TTL: time.Second, MaxRetries: 1}, "sleep", "30")
	if job := waitStatus(t, c, slow, jobclient.StatusFailed, jobclient.StatusDeadLettered); !strings.Contains(job.Error, "TTL of 1s") {
		t.Errorf("TTL: error %q", job.Error)
	}
	if d := time.Since(start); d > 20*time.Second { // far below the command's 30 s
		t.Errorf("the TTL of 1s stopped the command after %v", d)
	}

	// A cancelled running job: the server tells the worker, which kills
	// the command and every process it started.
	pidFile := filepath.Join(t.TempDir(), "pid")
	cancelled := submitCommand(t, c, jobclient.SubmitOptions{}, "sh", "-c", "sleep 30 & echo $! > "+pidFile+"; wait")
	waitStatus(t, c, cancelled, jobclient.StatusRunning)
	for _, err := os.Stat(pidFile); err != nil; _, err = os.Stat(pidFile) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Cancel(context.Background(), cancelled); err != nil {
		t.Fatal(err)
	}
	job := waitStatus(t, c, cancelled, jobclient.StatusDeadLettered)
	if job.Error != "cancelled" {
		t.Errorf("cancel: error %q", job.Error)
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled job's process %d still runs", pid)
		}
	}

	// Drain: the running job finishes and is reported before Run returns.
	last := submitCommand(t, c, jobclient.SubmitOptions{}, "sh", "-c", "sleep 0.5; echo drained")
	waitStatus(t, c, last, jobclient.StatusRunning)
	drain()
	select {
	case <-done:
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop after draining")
	}
	if job := waitStatus(t, c, last, jobclient.StatusDone); string(job.Result) != "drained\n" {
		t.Errorf("drained job: result %q", job.Result)
	}
}

func TestWorkerReconnectsAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startSurgeServer(t, "127.0.0.1:0", dir)
	c := jobclient.New(srv.url())
	runCommandWorker(t, c, jobclient.WorkerConfig{ID: "phoenix", Concurrency: 2})

	first := submitCommand(t, c, jobclient.SubmitOptions{}, "echo", "before")
	waitStatus(t, c, first, jobclient.StatusDone)

	addr := srv.addr
	srv.close(t)
	// Same address and data: the worker's retries find it again.
	var srv2 *surgeProc
	for i := 0; ; i++ {
		p, err := tryStart(addr, dir)
		if err == nil {
			srv2 = p
			break
		}
		if i == 50 {
			t.Fatalf("restart on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { srv2.close(t) })

	second := submitCommand(t, c, jobclient.SubmitOptions{}, "echo", "after")
	if job := waitStatus(t, c, second, jobclient.StatusDone); string(job.Result) != "after\n" {
		t.Fatalf("after restart: result %q", job.Result)
	}
}

// tryStart starts a server but returns the error instead of failing, so a
// restart may wait for its port to be free.
func tryStart(addr, dir string) (*surgeProc, error) {
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	p := &surgeProc{dir: dir, stop: stop, done: make(chan error, 1)}
	cfg := server.Config{Addr: addr, DataDir: dir, Ready: ready, Logger: slog.New(slog.DiscardHandler)}
	go func() { p.done <- server.Run(ctx, cfg) }()
	select {
	case p.addr = <-ready:
		return p, nil
	case err := <-p.done:
		stop()
		return nil, fmt.Errorf("server.Run: %w", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, errors.New("server did not start")
	}
}
