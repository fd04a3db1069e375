package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// startJobServer starts `surge serve` with a short job lease, so that a
// killed worker's jobs come back within the test.
func startJobServer(t *testing.T, bin, dataDir, addr string) *serverProc {
	t.Helper()
	return startServer(t, bin, dataDir, addr, "--job-lease", "2s")
}

// startWorker runs `surge worker` as its own process.
func startWorker(t *testing.T, bin, base, id string) (*exec.Cmd, string) {
	t.Helper()
	logf := filepath.Join(t.TempDir(), id+".log")
	lf, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "worker", "--server", base, "--id", id, "--concurrency", "4", "--heartbeat", "500ms")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd, logf
}

// TestKill9Jobs runs `surge serve` and two `surge worker` processes that
// execute real commands (each appends its job's token to a file), submits
// jobs from several clients, kills the server with SIGKILL while jobs are
// submitted, queued, running and being reported, restarts it on the same
// data directory, later kills one worker with SIGKILL while it runs jobs,
// and checks: every job whose submit was acknowledged ends DONE (or, for
// the ones whose command fails, DEAD_LETTERED after its retry), was
// executed at least once, and none was lost or made twice (submits are
// retried across the crash with an idempotency key, and the queue holds
// exactly one job per key).
func TestKill9Jobs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server and workers")
	}
	bin, dataDir, addr := buildSurge(t), t.TempDir(), freeAddr(t)
	srv := startJobServer(t, bin, dataDir, addr)
	defer func() { srv.cmd.Process.Signal(syscall.SIGKILL); srv.cmd.Wait() }()
	execs := filepath.Join(t.TempDir(), "execs")
	w1, w1log := startWorker(t, bin, srv.base, "w1")
	_, w2log := startWorker(t, bin, srv.base, "w2")
	dump := func() {
		for _, f := range []string{srv.logf, w1log, w2log} {
			b, _ := os.ReadFile(f)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("--- %s:\n%s", filepath.Base(f), b)
		}
	}

	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	jobsC := jqpbconnect.NewJobServiceClient(hc, srv.base, connect.WithGRPC())

	const total, killServerAt, killWorkerAt = 400, 120, 260
	type acked struct {
		id    string
		fails bool
	}
	var (
		mu      sync.Mutex
		byToken = map[string]acked{}
		next    int
	)
	serverKilled := make(chan struct{})
	workerKilled := make(chan struct{})
	var once1, once2 sync.Once
	submit := func(token string, fails bool) {
		cmd := fmt.Sprintf("echo %s >> %s; sleep 0.1", token, execs)
		if fails {
			cmd += "; exit 3"
		}
		req := &jqpb.SubmitJobRequest{QueueName: "default", Payload: fmt.Appendf(nil, `{"command":["sh","-c",%q]}`, cmd),
			IdempotencyKey: token, Priority: int32(len(token) % 10)}
		if fails {
			req.MaxRetries = 1
		}
		for {
			res, err := jobsC.SubmitJob(context.Background(), connect.NewRequest(req))
			if err == nil {
				mu.Lock()
				byToken[token] = acked{id: res.Msg.JobId, fails: fails}
				n := len(byToken)
				mu.Unlock()
				if n == killServerAt {
					once1.Do(func() { close(serverKilled) })
				}
				if n == killWorkerAt {
					once2.Do(func() { close(workerKilled) })
				}
				return
			}
			// Refused or unanswered (the server is down): the same key
			// again, so a submit that did land is not made twice.
			time.Sleep(50 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= total {
					return
				}
				submit(fmt.Sprintf("t%04d", i), i%10 == 3)
			}
		})
	}
	<-serverKilled
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	mu.Lock()
	t.Logf("server killed after %d acknowledged submits", len(byToken))
	mu.Unlock()
	srv = startJobServer(t, bin, dataDir, addr)
	<-workerKilled
	// Kill w1 while it holds jobs: its leases run out after 2 s and the
	// jobs go to w2.
	admin := jqpbconnect.NewAdminServiceClient(hc, srv.base, connect.WithGRPC())
	for busy := time.Now().Add(10 * time.Second); ; {
		res, err := admin.ListWorkers(context.Background(), connect.NewRequest(&jqpb.ListWorkersRequest{}))
		if err == nil && slices.ContainsFunc(res.Msg.Workers, func(w *jqpb.Worker) bool { return w.WorkerId == "w1" && w.ActiveJobCount > 0 }) {
			break
		}
		if time.Now().After(busy) {
			dump()
			t.Fatalf("w1 holds no job to be killed with: %v %v", res, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	w1.Process.Signal(syscall.SIGKILL)
	w1.Wait()
	wg.Wait()
	if len(byToken) != total {
		t.Fatalf("%d jobs acknowledged, want %d", len(byToken), total)
	}

	// Every acknowledged job ends.
	deadline := time.Now().Add(90 * time.Second)
	final := map[string]*jqpb.Job{}
	for len(final) < total {
		for token, a := range byToken {
			if final[token] != nil {
				continue
			}
			res, err := jobsC.GetJobStatus(context.Background(), connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: a.id}))
			if err != nil {
				dump()
				t.Fatalf("job %s (%s), acknowledged: %v", a.id, token, err)
			}
			if s := res.Msg.Job.Status; s == jqpb.JobStatus_DONE || s == jqpb.JobStatus_DEAD_LETTERED {
				final[token] = res.Msg.Job
			}
		}
		if time.Now().After(deadline) {
			dump()
			t.Fatalf("%d of %d jobs ended in 90 s", len(final), total)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ran, err := os.ReadFile(execs)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for line := range bytes.Lines(ran) {
		runs[strings.TrimSpace(string(line))]++
	}
	again, expired := 0, 0
	for token, a := range byToken {
		logs, err := jobsC.GetJobLogs(context.Background(), connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: a.id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range logs.Msg.Events {
			if e.Reason == "LEASE_EXPIRED" && e.WorkerId == "w1" {
				expired++
			}
		}
		j := final[token]
		want := jqpb.JobStatus_DONE
		if a.fails {
			want = jqpb.JobStatus_DEAD_LETTERED
		}
		if j.Status != want {
			t.Errorf("job %s (%s) ended %v, want %v (retries %d, error %q)", a.id, token, j.Status, want, j.RetryCount, j.ErrorMessage)
		}
		if runs[token] == 0 {
			t.Errorf("job %s (%s) ended %v but never ran", a.id, token, j.Status)
		}
		if runs[token] > 1 && !a.fails {
			again++
		}
	}
	// Exactly one job per key: submits retried across the crash did not
	// make a second job.
	count := 0
	page := ""
	for {
		res, err := jobsC.ListJobs(context.Background(), connect.NewRequest(&jqpb.ListJobsRequest{QueueName: "default", Limit: 100, PageToken: page}))
		if err != nil {
			t.Fatal(err)
		}
		count += len(res.Msg.Jobs)
		if page = res.Msg.NextPageToken; page == "" {
			break
		}
	}
	if count != total {
		t.Errorf("the queue holds %d jobs for %d keys", count, total)
	}
	// The killed worker held jobs: they came back when its leases ran out.
	if expired == 0 {
		t.Errorf("no job of the killed worker w1 came back through an expired lease")
	}
	t.Logf("%d jobs ended; %d leases of the killed worker expired; %d successful jobs ran more than once (at least once, after the kills)", total, expired, again)
	if t.Failed() {
		dump()
	}
}
