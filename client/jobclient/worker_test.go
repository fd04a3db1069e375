package jobclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
)

type greeting struct {
	Name string `json:"name"`
}

func TestWorkerRunsTypedHandlersAndDrains(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w1", Concurrency: 2})
	Handle(w, "greet", func(_ context.Context, job *Job[greeting]) ([]byte, error) {
		if job.Args.Name == "" {
			return nil, errors.New("no name")
		}
		return []byte("hello " + job.Args.Name), nil
	})
	Handle(w, "raw", func(_ context.Context, job *Job[[]byte]) ([]byte, error) {
		return append([]byte("raw:"), job.Args...), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	if s.req.WorkerId != "w1" || !s.req.AcceptsCancel || strings.Join(s.req.Queues, ",") != "greet,raw" {
		t.Fatalf("stream request %v", s.req)
	}

	cases := []struct {
		a       *jqpb.JobAssignment
		success bool
		want    string // result, or a part of the error message
	}{
		{&jqpb.JobAssignment{JobId: "j1", QueueName: "greet", Payload: []byte(`{"name":"ada"}`)}, true, "hello ada"},
		{&jqpb.JobAssignment{JobId: "j2", QueueName: "greet", Payload: []byte(`{}`)}, false, "no name"},
		{&jqpb.JobAssignment{JobId: "j3", QueueName: "greet", Payload: []byte(`not json`)}, false, "does not decode into jobclient.greeting"},
		{&jqpb.JobAssignment{JobId: "j4", QueueName: "raw", Payload: []byte(`not json`)}, true, "raw:not json"},
		{&jqpb.JobAssignment{JobId: "j5", QueueName: "other"}, false, `no handler for queue "other"`},
		{&jqpb.JobAssignment{JobId: "j6", QueueName: "raw", Payload: bytes.Repeat([]byte("x"), maxResultLen)}, false, "over the server's limit"},
	}
	for _, tc := range cases {
		s.send <- tc.a
		r := recv(t, f.reports, "report of "+tc.a.JobId)
		got := string(r.Result)
		if !r.Success {
			got = r.ErrorMessage
		}
		if r.JobId != tc.a.JobId || r.WorkerId != "w1" || r.Success != tc.success || !strings.Contains(got, tc.want) {
			t.Errorf("%s: report %v, want success=%v with %q", tc.a.JobId, r, tc.success, tc.want)
		}
	}
	for _, id := range []string{"j1", "j2", "j3", "j4", "j6"} {
		if got := recv(t, f.acks, "ack"); got != id {
			t.Errorf("ack %s, want %s", got, id)
		}
	}
	none(t, f.acks, "ack of a job without a handler")

	cancel()
	if err := recv(t, done, "Run to return"); err != nil {
		t.Fatal(err)
	}
	if id := recv(t, f.deregistered, "deregister"); id != "w1" {
		t.Fatalf("deregistered %q", id)
	}
}

func TestWorkerDrainLetsRunningJobsFinish(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{})
	release := make(chan struct{})
	var handlerCtxErr atomic.Value
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-release
		handlerCtxErr.Store(fmt.Sprint(ctx.Err()))
		return []byte("finished"), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	if w.ID() != "assigned-1" || len(s.req.Queues) != 0 {
		t.Fatalf("id %q queues %v: want the server's id and its default queue", w.ID(), s.req.Queues)
	}
	s.send <- &jqpb.JobAssignment{JobId: "long", QueueName: "default"}
	recv(t, f.acks, "ack")

	cancel()
	none(t, done, "Run's return while a job runs")
	none(t, f.deregistered, "deregister while a job runs")
	close(release)
	r := recv(t, f.reports, "report")
	if !r.Success || string(r.Result) != "finished" {
		t.Fatalf("report %v", r)
	}
	if got := handlerCtxErr.Load(); got != "<nil>" {
		t.Fatalf("handler context ended by the drain: %v", got)
	}
	if err := recv(t, done, "Run"); err != nil {
		t.Fatal(err)
	}
	recv(t, f.deregistered, "deregister")
}

func TestWorkerStopsACancelledJob(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w"})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	recv(t, f.acks, "ack")
	s.send <- &jqpb.JobAssignment{JobId: "j", Cancel: true}
	r := recv(t, f.reports, "report")
	if r.Success || r.ErrorMessage != "cancelled" {
		t.Fatalf("report %v, want a failure \"cancelled\"", r)
	}
	cancel()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerTTLIsTheHandlersDeadline(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w"})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		if job.TTL != time.Second {
			return nil, fmt.Errorf("TTL %v", job.TTL)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	start := time.Now()
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default", TtlSeconds: 1}
	r := recv(t, f.reports, "report")
	if r.Success || !strings.Contains(r.ErrorMessage, "TTL of 1s") {
		t.Fatalf("report %v, want a TTL failure", r)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("stopped after %v, before the TTL", d)
	}
}

func TestWorkerRunsAtMostConcurrencyHandlers(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w", Concurrency: 2})
	release := make(chan struct{})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-release
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	for i := range 3 {
		s.send <- &jqpb.JobAssignment{JobId: fmt.Sprint(i), QueueName: "default"}
	}
	recv(t, f.acks, "first ack")
	recv(t, f.acks, "second ack")
	none(t, f.acks, "a third job started")
	release <- struct{}{}
	recv(t, f.reports, "report")
	recv(t, f.acks, "third ack")
	close(release)
	recv(t, f.reports, "report")
	recv(t, f.reports, "report")
}

func TestWorkerReconnectsAndKeepsRunningJobs(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w", Heartbeat: 10 * time.Millisecond})
	release := make(chan struct{})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-release
		return []byte("ok"), ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	// A fresh process says it holds nothing (the server gives back what
	// an earlier process of the id held).
	if s.req.Held == nil || len(s.req.Held.JobIds) != 0 {
		t.Fatalf("first stream declares %v, want an empty list", s.req.Held)
	}
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	recv(t, f.acks, "ack")
	// Heartbeats name the job it runs.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		held := f.lastHeld
		f.mu.Unlock()
		if held != nil && slices.Equal(held.JobIds, []string{"j"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeats declare %v, want [j]", held)
		}
	}
	s.end <- connect.NewError(connect.CodeUnavailable, errors.New("server restarting"))

	s2 := recv(t, f.streams, "second stream")
	if s2.req.Held == nil || !slices.Equal(s2.req.Held.JobIds, []string{"j"}) {
		t.Fatalf("reconnect declares %v, want [j]", s2.req.Held)
	}
	// The restarted server pushes the still-leased job again: it runs once.
	s2.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	none(t, f.acks, "the duplicate started")
	close(release)
	if r := recv(t, f.reports, "report"); !r.Success {
		t.Fatalf("report %v", r)
	}
	none(t, f.reports, "a second report")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.registers != 2 {
		t.Fatalf("%d registrations, want one per stream", f.registers)
	}
}

func TestWorkerShutdownByServerStopsJobsWithoutReports(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w"})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	done := runWorker(context.Background(), w)
	s := recv(t, f.streams, "stream")
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	recv(t, f.acks, "ack")
	s.end <- connect.NewError(connect.CodeAborted, errors.New("shut down by an operator"))
	if err := recv(t, done, "Run"); err != nil {
		t.Fatal(err)
	}
	recv(t, f.deregistered, "deregister")
	none(t, f.reports, "report")
}

func TestWorkerDrainedByServer(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w"})
	release := make(chan struct{})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-release
		return nil, nil
	})
	done := runWorker(context.Background(), w)
	s := recv(t, f.streams, "stream")
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	recv(t, f.acks, "ack")
	s.end <- nil
	none(t, done, "Run's return while a job runs")
	close(release)
	recv(t, f.reports, "report")
	if err := recv(t, done, "Run"); err != nil {
		t.Fatal(err)
	}
	recv(t, f.deregistered, "deregister")
	none(t, f.streams, "a stream after the drain")
}

func TestWorkerStopNowCancelsHandlers(t *testing.T) {
	f, c := newFakeServer(t)
	w := NewWorker(c, WorkerConfig{ID: "w"})
	Handle(w, "", func(ctx context.Context, job *Job[[]byte]) ([]byte, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runWorker(ctx, w)
	s := recv(t, f.streams, "stream")
	s.send <- &jqpb.JobAssignment{JobId: "j", QueueName: "default"}
	recv(t, f.acks, "ack")
	cancel() // drain first, as a first Ctrl-C
	none(t, done, "Run's return while draining")
	w.StopNow()
	if err := recv(t, done, "Run"); err != nil {
		t.Fatal(err)
	}
	recv(t, f.deregistered, "deregister")
	none(t, f.reports, "report")
}

func TestSecondsRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int32{0: 0, time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2} {
		if got, err := seconds(d); err != nil || got != want {
			t.Errorf("seconds(%v) = %d, %v; want %d", d, got, err, want)
		}
	}
	if _, err := seconds(-time.Second); err == nil {
		t.Error("a negative TTL was accepted")
	}
}
