package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/surge-run/surge/internal/jqpb"
)

// ctlResult is what one `surge ctl` run printed and how it ended, as main
// would report it.
type ctlResult struct {
	out    string
	errMsg string // "surge ctl: ..." as main prints it; "" on success
	status int
}

// runCtl runs `surge ctl --server base ARGS...` in process, through the
// same root command and error mapping as main.
func runCtl(t *testing.T, base string, stdin io.Reader, args ...string) ctlResult {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	root.SetIn(stdin)
	root.SetArgs(append([]string{"ctl", "--server", base, "--timeout", "5s"}, args...))
	cmd, err := root.ExecuteC()
	r := ctlResult{out: out.String()}
	if err != nil {
		r.errMsg = errorPrefix(cmd) + ": " + err.Error()
		r.status = exitStatus(err)
	}
	return r
}

// ok runs a command that must succeed and returns its output.
func ok(t *testing.T, base string, stdin io.Reader, args ...string) string {
	t.Helper()
	r := runCtl(t, base, stdin, args...)
	if r.status != 0 {
		t.Fatalf("surge ctl %s: %s (exit %d)", strings.Join(args, " "), r.errMsg, r.status)
	}
	return r.out
}

// same compares output with a golden text, ignoring trailing spaces that
// tabwriter pads a last empty column with; a golden may start with a line
// break so that its first line lines up with the rest.
func same(t *testing.T, what, got, want string) {
	t.Helper()
	want = strings.TrimPrefix(want, "\n")
	trim := func(s string) string {
		lines := strings.Split(s, "\n")
		for i, l := range lines {
			lines[i] = strings.TrimRight(l, " ")
		}
		return strings.Join(lines, "\n")
	}
	if trim(got) != trim(want) {
		t.Errorf("%s:\n--- got\n%s--- want\n%s", what, got, want)
	}
}

// jsonOf runs a command with --json and parses its one line back into m.
func jsonOf(t *testing.T, base string, m proto.Message, args ...string) {
	t.Helper()
	out := ok(t, base, nil, append([]string{"--json"}, args...)...)
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("surge ctl --json %s: want one line, got %q", strings.Join(args, " "), out)
	}
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("surge ctl --json %s: %v in %q", strings.Join(args, " "), err, out)
	}
	// Every field is there, zero or not, so scripts need not know proto3's
	// defaults.
	var generic map[string]any
	if err := json.Unmarshal([]byte(out), &generic); err != nil {
		t.Fatal(err)
	}
	if want := m.ProtoReflect().Descriptor().Fields().Len(); len(generic) != want {
		t.Errorf("surge ctl --json %s: %d fields, want all %d: %s", strings.Join(args, " "), len(generic), want, out)
	}
}

func pinZone(t *testing.T) {
	old := ctlZone
	ctlZone = time.UTC
	t.Cleanup(func() { ctlZone = old })
}

func TestCtlSubmitFlagsOnTheWire(t *testing.T) {
	f := newFakeJQ()
	base := serveFake(t, f)
	before := time.Now()
	id := ok(t, base, nil, "job", "submit", "default", `{"to":"a@b.c"}`, "--priority", "7", "--max-retries", "2",
		"--ttl", "1500ms", "--not-before", "90s", "--key", "k1")
	if id != "job-1\n" {
		t.Fatalf("submit printed %q, want the job id", id)
	}
	s := f.lastSubmit
	if s.QueueName != "default" || string(s.Payload) != `{"to":"a@b.c"}` || s.Priority != 7 || s.MaxRetries != 2 ||
		s.TtlSeconds != 2 || s.IdempotencyKey != "k1" {
		t.Errorf("submit sent %v", s)
	}
	if nb := s.NotBefore.AsTime(); nb.Before(before.Add(90*time.Second)) || nb.After(time.Now().Add(90*time.Second)) {
		t.Errorf("--not-before 90s sent %v, want 90 s after %v", nb, before)
	}
	if again := ok(t, base, nil, "job", "submit", "default", "--key", "k1"); again != id {
		t.Errorf("resubmit with the same key printed %q, want %q", again, id)
	}

	ok(t, base, nil, "job", "submit", "default", "--not-before", "2025-06-02T08:30:00+02:00", "--command", "--", "echo", `a "b"`, "-n", "<&>")
	if got, want := string(f.lastSubmit.Payload), `{"command":["echo","a \"b\"","-n","<&>"]}`; got != want {
		t.Errorf("--command payload %s, want %s", got, want)
	}
	if got := f.lastSubmit.NotBefore.AsTime(); !got.Equal(time.Date(2025, 6, 2, 6, 30, 0, 0, time.UTC)) {
		t.Errorf("--not-before RFC 3339 sent %v", got)
	}
	if f.lastSubmit.TtlSeconds != 0 || f.lastSubmit.Priority != 0 {
		t.Errorf("defaults sent %v", f.lastSubmit)
	}

	ok(t, base, strings.NewReader("\x00\xffbinary\n"), "job", "submit", "default", "-")
	if got := string(f.lastSubmit.Payload); got != "\x00\xffbinary\n" {
		t.Errorf("payload from stdin %q", got)
	}
}

// Mistakes on the command line exit 2 and send nothing; failed calls exit
// 1 with the gRPC code and the server's message.
func TestCtlErrors(t *testing.T) {
	f := newFakeJQ()
	base := serveFake(t, f)
	for _, c := range []struct {
		args   []string
		status int
		msg    string
	}{
		{[]string{"job", "status", "nope"}, 1, `surge ctl: NOT_FOUND: jobs: no job "nope"`},
		{[]string{"job", "submit", "nope", "x"}, 1, `surge ctl: NOT_FOUND: jobs: no queue "nope"`},
		{[]string{"job", "submit", "default", "--priority", "12"}, 1, `surge ctl: INVALID_ARGUMENT: jobs: priority 12 is not in 0..9`},
		{[]string{"queue", "create", "default"}, 1, `surge ctl: ALREADY_EXISTS: jobs: queue "default" exists`},
		{[]string{"worker", "drain", "w-9"}, 1, `surge ctl: NOT_FOUND: jobs: no worker "w-9"`},
		{[]string{"job", "status"}, 2, "surge ctl: accepts 1 arg(s), received 0"},
		{[]string{"job", "status", "a", "b"}, 2, "surge ctl: accepts 1 arg(s), received 2"},
		{[]string{"job", "frob"}, 2, `surge ctl: unknown command "frob" for "surge ctl job"`},
		{[]string{"job", "submit", "default", "a", "b"}, 2, "surge ctl: one PAYLOAD argument at most, got 2 (quote it, or use --command PROG ARG...)"},
		{[]string{"job", "submit", "default", "--command"}, 2, "surge ctl: --command needs a program to run after QUEUE"},
		{[]string{"job", "submit", "default", "--ttl", "-1s"}, 2, "surge ctl: --ttl -1s: must not be negative"},
		{[]string{"job", "submit", "default", "--not-before", "tomorrow"}, 2, `surge ctl: --not-before "tomorrow": want a duration from now such as 90s or 2h, or an RFC 3339 time such as 2025-06-01T12:00:00Z`},
		{[]string{"job", "submit", "default", "--priority", "high"}, 2, `surge ctl: invalid argument "high" for "--priority" flag: strconv.ParseInt: parsing "high": invalid syntax`},
		{[]string{"job", "list", "default", "--status", "lost"}, 2, `surge ctl: --status "lost": want pending, assigned, running, done, failed or dead_lettered`},
		{[]string{"queue", "list", "--frob"}, 2, "surge ctl: unknown flag: --frob"},
	} {
		r := runCtl(t, base, nil, c.args...)
		if r.status != c.status || r.errMsg != c.msg {
			t.Errorf("surge ctl %s: exit %d, %q; want exit %d, %q", strings.Join(c.args, " "), r.status, r.errMsg, c.status, c.msg)
		}
	}
	if f.lastSubmit != nil && f.lastSubmit.Priority != 12 {
		t.Errorf("a refused command line reached the server: %v", f.lastSubmit)
	}

	// Nothing listening: the transport error, as UNAVAILABLE.
	r := runCtl(t, "http://127.0.0.1:1", nil, "status")
	if r.status != 1 || !strings.HasPrefix(r.errMsg, "surge ctl: UNAVAILABLE: ") {
		t.Errorf("no server: exit %d, %q", r.status, r.errMsg)
	}
	if r := runCtl(t, "127.0.0.1:8080", nil, "status"); r.status != 2 {
		t.Errorf("--server without a scheme: exit %d, %q; want a usage error", r.status, r.errMsg)
	}
}

func TestCtlPayloadDisplay(t *testing.T) {
	for _, c := range []struct {
		in         string
		full, cell string
	}{
		{"", "-", "-"},
		{`{"command":["echo","hi"]}`, `{"command":["echo","hi"]}`, `{"command":["echo","hi"]}`},
		{"line one\n\tline two", "line one\n\tline two", "line one  line two"},
		{"\x00\x01", "base64:AAE=", "base64:AAE="},
		{"\xff", "base64:/w==", "base64:/w=="},
		{strings.Repeat("é", 50), strings.Repeat("é", 50), strings.Repeat("é", 39) + "…"},
		{"abc\u202edcba", "base64:YWJj4oCuZGNiYQ==", "base64:YWJj4oCuZGNiYQ=="},
	} {
		if got := showBytes([]byte(c.in)); got != c.full {
			t.Errorf("showBytes(%q) = %q, want %q", c.in, got, c.full)
		}
		if got := cell([]byte(c.in)); got != c.cell {
			t.Errorf("cell(%q) = %q, want %q", c.in, got, c.cell)
		}
	}
	// A job's error message (a worker's raw stderr) is shown line by
	// line; a line with an escape sequence is quoted, not played.
	var out bytes.Buffer
	if err := printJob(&out, &jqpb.Job{JobId: "j", ErrorMessage: "plain line\n\x1b[31mred\x1b[0m\rtail"}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsRune(s, 0x1b) || !strings.Contains(s, `"\x1b[31mred\x1b[0m\rtail"`) || !strings.Contains(s, "plain line") {
		t.Errorf("error message printed as:\n%s", s)
	}
	for d, want := range map[time.Duration]string{
		1234 * time.Nanosecond:                "1µs",
		12345678 * time.Nanosecond:            "12.3ms",
		1234567 * time.Microsecond:            "1.23s",
		83*time.Second + 600*time.Millisecond: "1m24s",
	} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// Each command's table against the fake, whose clock and ids are fixed,
// and its --json parsed back.
func TestCtlCommandsAgainstFake(t *testing.T) {
	pinZone(t)
	f := newFakeJQ()
	base := serveFake(t, f)

	same(t, "queue create", ok(t, base, nil, "queue", "create", "mail", "--max-retries", "5", "--ttl", "90s"), `
QUEUE  MAX RETRIES  TTL    PAUSED  CREATED
mail   5            1m30s  no      2025-06-01T12:00:01Z
`)
	var cq jqpb.CreateQueueResponse
	jsonOf(t, base, &cq, "queue", "create", "bulk")
	if cq.GetQueue().GetName() != "bulk" || cq.GetQueue().GetMaxRetries() != 3 {
		t.Errorf("queue create --json: %v", &cq)
	}

	ok(t, base, nil, "job", "submit", "default", `{"command":["echo","hi"]}`, "--priority", "5")
	ok(t, base, nil, "job", "submit", "default", "-", "--priority", "1")
	ok(t, base, strings.NewReader("\x00\xff"), "job", "submit", "default", "-", "--priority", "1")
	var sub jqpb.SubmitJobResponse
	jsonOf(t, base, &sub, "job", "submit", "mail", "hello")
	if sub.GetJobId() != "job-4" {
		t.Errorf("job submit --json: %v", &sub)
	}
	f.finish("job-1", true, []byte("hi\n"), "")
	f.finish("job-3", false, []byte("partial\n\toutput\n"), "exit status 3")

	same(t, "job status", ok(t, base, nil, "job", "status", "job-1"), `
Job:         job-1
Queue:       default
Status:      DONE
Priority:    5
Retries:     0 of 3
Worker:      w-1
Created:     2025-06-01T12:00:03Z
Not before:  -
Started:     2025-06-01T12:00:12Z
Completed:   2025-06-01T12:00:13Z
Duration:    1.23s
Payload:     {"command":["echo","hi"]}
Result:      hi
Error:       -
`)
	same(t, "job status (binary, failed)", ok(t, base, nil, "job", "status", "job-3"), `
Job:         job-3
Queue:       default
Status:      DEAD_LETTERED
Priority:    1
Retries:     0 of 3
Worker:      w-1
Created:     2025-06-01T12:00:07Z
Not before:  -
Started:     2025-06-01T12:00:15Z
Completed:   2025-06-01T12:00:16Z
Duration:    1.23s
Payload:     base64:AP8=
Result:      partial
                 output
Error:       exit status 3
`)
	var js jqpb.GetJobStatusResponse
	jsonOf(t, base, &js, "job", "status", "job-1")
	if js.GetJob().GetStatus() != jqpb.JobStatus_DONE || string(js.GetJob().GetResult()) != "hi\n" {
		t.Errorf("job status --json: %v", &js)
	}

	same(t, "job logs", ok(t, base, nil, "job", "logs", "job-1"), `
#  TIME                  FROM      TO        WORKER  REASON
1  2025-06-01T12:00:04Z  -         PENDING   -       submitted
2  2025-06-01T12:00:11Z  PENDING   ASSIGNED  w-1     leased
3  2025-06-01T12:00:12Z  ASSIGNED  RUNNING   w-1     acknowledged
4  2025-06-01T12:00:13Z  RUNNING   DONE      w-1     succeeded
`)
	var jl jqpb.GetJobLogsResponse
	jsonOf(t, base, &jl, "job", "logs", "job-3")
	if n := len(jl.GetEvents()); n != 5 || jl.GetEvents()[4].GetToStatus() != jqpb.JobStatus_DEAD_LETTERED {
		t.Errorf("job logs --json: %v", &jl)
	}

	same(t, "job list", ok(t, base, nil, "job", "list", "default", "--limit", "2"), `
JOB    STATUS   PRI  RETRIES  CREATED               WORKER  PAYLOAD
job-1  DONE     5    0/3      2025-06-01T12:00:03Z  w-1     {"command":["echo","hi"]}
job-2  PENDING  1    0/3      2025-06-01T12:00:05Z  -       -
Next page: --page-token 2
`)
	same(t, "job list page 2", ok(t, base, nil, "job", "list", "default", "--limit", "2", "--page-token", "2"), `
JOB    STATUS         PRI  RETRIES  CREATED               WORKER  PAYLOAD
job-3  DEAD_LETTERED  1    0/3      2025-06-01T12:00:07Z  w-1     base64:AP8=
`)
	same(t, "job list --status", ok(t, base, nil, "job", "list", "default", "--status", "dead-lettered"), `
JOB    STATUS         PRI  RETRIES  CREATED               WORKER  PAYLOAD
job-3  DEAD_LETTERED  1    0/3      2025-06-01T12:00:07Z  w-1     base64:AP8=
`)
	var list jqpb.ListJobsResponse
	jsonOf(t, base, &list, "job", "list", "default", "--limit", "1")
	if len(list.GetJobs()) != 1 || list.GetNextPageToken() != "1" {
		t.Errorf("job list --json: %v", &list)
	}

	same(t, "job cancel", ok(t, base, nil, "job", "cancel", "job-2"), "cancelled job job-2\n")
	same(t, "job retry", ok(t, base, nil, "job", "retry", "job-3"), "job-3\n")
	jsonOf(t, base, &jqpb.CancelJobResponse{}, "job", "cancel", "job-4")
	var rj jqpb.RetryJobResponse
	jsonOf(t, base, &rj, "job", "retry", "job-2")
	if rj.GetJobId() != "job-2" {
		t.Errorf("job retry --json: %v", &rj)
	}

	same(t, "queue stats", ok(t, base, nil, "queue", "stats", "default"), `
Queue:         default
Pending:       2
Running:       0
Failed:        0
Done:          1
Dead letters:  0
Processed:     1
Avg duration:  265.4ms
Error rate:    0.0%
`)
	var qs jqpb.GetQueueStatsResponse
	jsonOf(t, base, &qs, "queue", "stats", "default")
	if qs.GetStats().GetDoneCount() != 1 || qs.GetStats().GetPendingCount() != 2 {
		t.Errorf("queue stats --json: %v", &qs)
	}
	same(t, "queue pause", ok(t, base, nil, "queue", "pause", "mail"), `
QUEUE  MAX RETRIES  TTL    PAUSED  CREATED
mail   5            1m30s  yes     2025-06-01T12:00:01Z
`)
	same(t, "queue list", ok(t, base, nil, "queue", "list"), `
QUEUE    MAX RETRIES  TTL    PAUSED  CREATED
default  3            none   no      2025-06-01T12:00:00Z
mail     5            1m30s  yes     2025-06-01T12:00:01Z
bulk     3            none   no      2025-06-01T12:00:02Z
`)
	var ql jqpb.ListQueuesResponse
	jsonOf(t, base, &ql, "queue", "list")
	if len(ql.GetQueues()) != 3 || !ql.GetQueues()[1].GetPaused() {
		t.Errorf("queue list --json: %v", &ql)
	}
	var qr jqpb.ResumeQueueResponse
	jsonOf(t, base, &qr, "queue", "resume", "mail")
	if qr.GetQueue().GetPaused() {
		t.Errorf("queue resume --json: %v", &qr)
	}
	var qp jqpb.PauseQueueResponse
	jsonOf(t, base, &qp, "queue", "pause", "bulk")
	if !qp.GetQueue().GetPaused() {
		t.Errorf("queue pause --json: %v", &qp)
	}
	if r := runCtl(t, base, nil, "queue", "delete", "mail"); r.status != 1 || !strings.HasPrefix(r.errMsg, "surge ctl: FAILED_PRECONDITION: ") {
		t.Errorf("delete of a queue with jobs: exit %d, %q", r.status, r.errMsg)
	}
	same(t, "queue delete --force", ok(t, base, nil, "queue", "delete", "mail", "--force"), "deleted queue mail\n")
	jsonOf(t, base, &jqpb.DeleteQueueResponse{}, "queue", "delete", "bulk")

	same(t, "worker list", ok(t, base, nil, "worker", "list"), `
WORKER  HOSTNAME  STATUS  CONCURRENCY  ACTIVE  LAST HEARTBEAT        QUEUES
w-1     box1      ONLINE  4            1       2025-06-01T12:00:00Z  default,mail
`)
	same(t, "worker drain", ok(t, base, nil, "worker", "drain", "w-1"), "draining worker w-1\n")
	var wl jqpb.ListWorkersResponse
	jsonOf(t, base, &wl, "worker", "list")
	if len(wl.GetWorkers()) != 1 || wl.GetWorkers()[0].GetStatus() != jqpb.WorkerStatus_DRAINING {
		t.Errorf("worker list --json: %v", &wl)
	}
	same(t, "worker shutdown", ok(t, base, nil, "worker", "shutdown", "w-1"), "shutting down worker w-1\n")
	jsonOf(t, base, &jqpb.DrainWorkerResponse{}, "worker", "drain", "w-1")
	jsonOf(t, base, &jqpb.ShutdownWorkerResponse{}, "worker", "shutdown", "w-1")

	same(t, "status", ok(t, base, nil, "status"), `
Healthy:         yes
Active workers:  1

COMPONENT  HEALTHY  MESSAGE
log        yes      ok

QUEUE    PENDING  RUNNING  FAILED  DONE  DEAD  PROCESSED  AVG DURATION  ERROR RATE
default  2        0        0       1     0     1          265.4ms       0.0%
`)
	var st jqpb.GetSystemStatusResponse
	jsonOf(t, base, &st, "status")
	if !st.GetHealthy() || len(st.GetQueueStats()) != 1 || st.GetQueueStats()[0].GetQueueName() != "default" {
		t.Errorf("status --json: %v", &st)
	}
}
