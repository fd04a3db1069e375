package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// startWorkerArgs runs `surge worker` with args as its own process.
func startWorkerArgs(t *testing.T, bin, base string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "worker.log")
	lf, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"worker", "--server", base, "--heartbeat", "500ms"}, args...)...)
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

// TestKill9WorkerRestartsUnderItsID is issue 17's repro with real
// processes: a worker holding a running job is killed with SIGKILL and
// started again under the same id (given with --id, or the default one
// it picks again); the job comes back at once (not after a lease, which
// is 30 s here and which the old heartbeats would have extended for ever)
// and a job submitted after the restart runs too.
func TestKill9WorkerRestartsUnderItsID(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server and workers")
	}
	bin, dataDir, addr := buildSurge(t), t.TempDir(), freeAddr(t)
	srv := startServer(t, bin, dataDir, addr, "--job-lease", "30s")
	defer func() { srv.cmd.Process.Signal(syscall.SIGKILL); srv.cmd.Wait() }()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	jobsC := jqpbconnect.NewJobServiceClient(hc, srv.base, connect.WithGRPC())
	ctx := context.Background()
	submit := func(cmd string) string {
		t.Helper()
		res, err := jobsC.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default",
			Payload: []byte(`{"command": ["sh", "-c", "` + cmd + `"]}`)}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.JobId
	}
	wait := func(id string, want jqpb.JobStatus, logs ...string) *jqpb.Job {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := jobsC.GetJobStatus(ctx, connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: id}))
			if err == nil && res.Msg.Job.Status == want {
				return res.Msg.Job
			}
			if time.Now().After(deadline) {
				for _, f := range append(logs, srv.logf) {
					b, _ := os.ReadFile(f)
					t.Logf("--- %s:\n%s", filepath.Base(f), b)
				}
				t.Fatalf("job %s: %v %v, want %v within 20 s", id, res, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"--id", []string{"--id", "w1"}},
		{"default id", []string{"--state-dir", t.TempDir()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--concurrency", "1"}, tc.args...)
			w, wlog := startWorkerArgs(t, bin, srv.base, args...)
			first := submit("sleep 3")
			wait(first, jqpb.JobStatus_RUNNING, wlog)
			w.Process.Signal(syscall.SIGKILL)
			w.Wait()
			_, wlog2 := startWorkerArgs(t, bin, srv.base, args...)
			second := submit("true")
			j := wait(first, jqpb.JobStatus_DONE, wlog, wlog2)
			wait(second, jqpb.JobStatus_DONE, wlog, wlog2)
			if j.RetryCount != 1 {
				t.Errorf("the killed attempt: %d retries, want 1", j.RetryCount)
			}
			// Both attempts were the same worker id's: the restarted
			// process came back as the killed one.
			logs, err := jobsC.GetJobLogs(ctx, connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: first}))
			if err != nil {
				t.Fatal(err)
			}
			var reasons []string
			for _, e := range logs.Msg.Events {
				reasons = append(reasons, e.Reason)
				if e.WorkerId != "" && e.WorkerId != j.WorkerId {
					t.Errorf("event %s by %s; the job ended on %s", e.Reason, e.WorkerId, j.WorkerId)
				}
			}
			if !slices.Contains(reasons, "WORKER_LOST") {
				t.Errorf("log %v: the killed attempt should be WORKER_LOST", reasons)
			}
		})
	}
}
