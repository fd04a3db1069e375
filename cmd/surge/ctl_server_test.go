package main

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/server"
)

// serveInProcess runs the real server on a free port for one test.
func serveInProcess(t *testing.T) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg := server.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 2, Ready: ready,
		MemoryLimit: -1, Logger: slog.New(slog.DiscardHandler)}
	go func() { errc <- server.Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-errc:
		errc <- err
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return ""
}

func h2c() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

// hasRow says whether a table has a line whose cells, split on runs of
// spaces, start with the given ones.
func hasRow(table string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		got := strings.Fields(line)
		if len(got) >= len(cells) && slices.Equal(got[:len(cells)], cells) {
			return true
		}
	}
	return false
}

// The commands against the real server, with a worker speaking the
// WorkerService to move jobs through their states.
func TestCtlAgainstServer(t *testing.T) {
	base := serveInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	out := ok(t, base, nil, "queue", "create", "mail", "--max-retries", "1", "--ttl", "1h")
	if !hasRow(out, "mail", "1", "1h0m0s", "no") {
		t.Errorf("queue create:\n%s", out)
	}
	id := strings.TrimSpace(ok(t, base, nil, "job", "submit", "mail", "--priority", "3", "--key", "k1", "--command", "--", "echo", "hi"))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("job submit printed %q, want one job id", id)
	}
	if again := strings.TrimSpace(ok(t, base, nil, "job", "submit", "mail", "--key", "k1", "other")); again != id {
		t.Errorf("resubmit with the same key: %q, want %q", again, id)
	}
	out = ok(t, base, nil, "job", "status", id)
	for _, want := range []string{"Status:      PENDING", "Priority:    3", `Payload:     {"command":["echo","hi"]}`, "Retries:     0 of 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("job status: no %q in\n%s", want, out)
		}
	}

	// A worker takes the job, starts it and reports success.
	workers := jqpbconnect.NewWorkerServiceClient(h2c(), base, connect.WithGRPC())
	if _, err := workers.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{
		WorkerId: "w-test", Hostname: "testhost", Concurrency: 2, Queues: []string{"mail"}})); err != nil {
		t.Fatal(err)
	}
	streamCtx, endStream := context.WithCancel(ctx)
	defer endStream()
	stream, err := workers.StreamJobs(streamCtx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "w-test"}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no assignment: %v", stream.Err())
	}
	if got := stream.Msg().GetJobId(); got != id {
		t.Fatalf("assigned %q, want %q", got, id)
	}
	if _, err := workers.AckJob(ctx, connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w-test", JobId: id})); err != nil {
		t.Fatal(err)
	}
	out = ok(t, base, nil, "worker", "list")
	if !hasRow(out, "w-test", "testhost", "ONLINE", "2", "1") || !strings.Contains(out, "mail") {
		t.Errorf("worker list:\n%s", out)
	}
	if _, err := workers.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{
		WorkerId: "w-test", JobId: id, Success: true, Result: []byte("hi\n")})); err != nil {
		t.Fatal(err)
	}

	out = ok(t, base, nil, "job", "status", id)
	for _, want := range []string{"Status:      DONE", "Result:      hi", "Duration:"} {
		if !strings.Contains(out, want) {
			t.Errorf("job status after the report: no %q in\n%s", want, out)
		}
	}
	out = ok(t, base, nil, "job", "logs", id)
	var path []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		path = append(path, strings.Fields(line)[3])
	}
	if got := strings.Join(path, " "); got != "PENDING ASSIGNED RUNNING DONE" {
		t.Errorf("job logs: states %s, want PENDING ASSIGNED RUNNING DONE:\n%s", got, out)
	}
	if !regexp.MustCompile(`(?m)^2\s+\S+\s+PENDING\s+ASSIGNED\s+w-test`).MatchString(out) {
		t.Errorf("job logs: no lease to w-test:\n%s", out)
	}
	var logs jqpb.GetJobLogsResponse
	jsonOf(t, base, &logs, "job", "logs", id)
	if len(logs.GetEvents()) != 4 || logs.GetEvents()[3].GetToStatus() != jqpb.JobStatus_DONE {
		t.Errorf("job logs --json: %v", &logs)
	}

	// A second job: cancelled while pending, then retried. The queue is
	// paused first so the connected worker cannot take it.
	out = ok(t, base, nil, "queue", "pause", "mail")
	if !hasRow(out, "mail", "1", "1h0m0s", "yes") {
		t.Errorf("queue pause:\n%s", out)
	}
	id2 := strings.TrimSpace(ok(t, base, strings.NewReader("payload from stdin"), "job", "submit", "mail", "-"))
	same(t, "job cancel", ok(t, base, nil, "job", "cancel", id2), "cancelled job "+id2+"\n")
	if out := ok(t, base, nil, "job", "status", id2); !strings.Contains(out, "Status:      DEAD_LETTERED") {
		t.Errorf("job status after cancel:\n%s", out)
	}
	if got := strings.TrimSpace(ok(t, base, nil, "job", "retry", id2)); got != id2 {
		t.Errorf("job retry printed %q, want %q", got, id2)
	}
	out = ok(t, base, nil, "job", "list", "mail", "--status", "pending")
	if !hasRow(out, id2, "PENDING", "0") || strings.Contains(out, id+" ") {
		t.Errorf("job list --status pending:\n%s", out)
	}
	out = ok(t, base, nil, "job", "list", "mail", "--limit", "1")
	m := regexp.MustCompile(`(?m)^Next page: --page-token (\S+)$`).FindStringSubmatch(out)
	if m == nil || strings.Count(out, "\n") != 3 {
		t.Fatalf("job list --limit 1: want one job and a next page token:\n%s", out)
	}
	page2 := ok(t, base, nil, "job", "list", "mail", "--limit", "1", "--page-token", m[1])
	if strings.Contains(page2, "Next page") || strings.Count(page2, "\n") != 2 {
		t.Errorf("job list page 2: want the last job alone:\n%s", page2)
	}
	var list jqpb.ListJobsResponse
	jsonOf(t, base, &list, "job", "list", "mail")
	if len(list.GetJobs()) != 2 {
		t.Errorf("job list --json: %v", &list)
	}

	out = ok(t, base, nil, "queue", "stats", "mail")
	for _, want := range []string{"Pending:       1", "Done:          1", "Processed:     1"} {
		if !strings.Contains(out, want) {
			t.Errorf("queue stats: no %q in\n%s", want, out)
		}
	}
	out = ok(t, base, nil, "queue", "list")
	if !hasRow(out, "default") || !hasRow(out, "mail", "1", "1h0m0s", "yes") {
		t.Errorf("queue list:\n%s", out)
	}
	var resumed jqpb.ResumeQueueResponse
	jsonOf(t, base, &resumed, "queue", "resume", "mail")
	if resumed.GetQueue().GetPaused() || resumed.GetQueue().GetName() != "mail" {
		t.Errorf("queue resume --json: %v", &resumed)
	}

	out = ok(t, base, nil, "status")
	// The resumed queue's job may already be with the worker: only the
	// finished one is certain.
	if !strings.Contains(out, "Healthy:         yes") || !regexp.MustCompile(`(?m)^mail\s+\d+\s+\d+\s+0\s+1\s+0\s+1\s`).MatchString(out) {
		t.Errorf("status:\n%s", out)
	}
	var st jqpb.GetSystemStatusResponse
	jsonOf(t, base, &st, "status")
	if !st.GetHealthy() || st.GetActiveWorkers() != 1 {
		t.Errorf("status --json: %v", &st)
	}

	same(t, "worker drain", ok(t, base, nil, "worker", "drain", "w-test"), "draining worker w-test\n")
	if out := ok(t, base, nil, "worker", "list"); !hasRow(out, "w-test", "testhost", "DRAINING") {
		t.Errorf("worker list after drain:\n%s", out)
	}
	same(t, "worker shutdown", ok(t, base, nil, "worker", "shutdown", "w-test"), "shutting down worker w-test\n")

	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"job", "status", "nope"}, "surge ctl: NOT_FOUND: "},
		{[]string{"job", "submit", "nope"}, "surge ctl: NOT_FOUND: "},
		{[]string{"job", "submit", "mail", "--priority", "10"}, "surge ctl: INVALID_ARGUMENT: "},
		{[]string{"queue", "delete", "mail"}, "surge ctl: FAILED_PRECONDITION: "},
		{[]string{"worker", "drain", "nobody"}, "surge ctl: NOT_FOUND: "},
	} {
		r := runCtl(t, base, nil, c.args...)
		if r.status != 1 || !strings.HasPrefix(r.errMsg, c.msg) {
			t.Errorf("surge ctl %s: exit %d, %q; want exit 1, %s...", strings.Join(c.args, " "), r.status, r.errMsg, c.msg)
		}
	}
	same(t, "queue delete --force", ok(t, base, nil, "queue", "delete", "mail", "--force"), "deleted queue mail\n")
	if out := ok(t, base, nil, "queue", "list"); hasRow(out, "mail") {
		t.Errorf("queue list after delete:\n%s", out)
	}
}
