package jobs

import (
	crand "crypto/rand"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/jqpb"
)

func edgeAPI() *API {
	a := &API{parts: 64, leaseNs: int64(DefaultLease), retentionNs: int64(DefaultRetention)}
	a.rngs.New = func() any {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		return rand.NewChaCha8(seed)
	}
	return a
}

// Every command a jobs RPC makes, built from the largest request the
// documented limits allow through the handler's own checks and command
// building, fits one log entry with its envelope: a legal request never
// makes a command the log refuses.
//
// The RPCs not listed log nothing: RegisterWorker, DrainWorker and
// ShutdownWorker change only the in-memory registry; GetJobStatus,
// GetJobLogs, ListJobs, ListQueues, GetQueueStats, ListWorkers and
// GetSystemStatus are queries.
func TestEveryRPCCommandFitsALogEntry(t *testing.T) {
	a := edgeAPI()
	queue, worker, job := apitest.Longest(MaxNameLen), apitest.Longest(MaxIDLen), apitest.Longest(MaxIDLen)
	maxSubmit := func(payload int) *jqpb.SubmitJobRequest {
		return &jqpb.SubmitJobRequest{QueueName: queue, Payload: make([]byte, payload), Priority: MaxPriority, MaxRetries: MaxMaxRetries,
			TtlSeconds: MaxTTLSeconds, IdempotencyKey: apitest.Longest(MaxKeyLen), NotBefore: timestamppb.New(time.Date(2199, 1, 1, 0, 0, 0, 0, time.UTC))}
	}
	// The largest batch: MaxSubmitBatch jobs whose payloads add up to
	// the batch limit.
	batch := make([]*jqpb.SubmitJobRequest, MaxSubmitBatch)
	for i := range batch {
		batch[i] = maxSubmit(MaxSubmitBatchBytes / MaxSubmitBatch)
	}
	batch[0].Payload = make([]byte, MaxSubmitBatchBytes-(MaxSubmitBatch-1)*(MaxSubmitBatchBytes/MaxSubmitBatch))
	mustOK := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("the worst legal request was refused: %v", err)
		}
	}
	for _, c := range []struct {
		rpc   string
		build func() (engine.Command, error)
	}{
		{"JobService/SubmitJob", func() (engine.Command, error) {
			s, err := a.submitOf(maxSubmit(MaxPayloadBytes))
			s.JobID = job
			return &s, err
		}},
		{"JobService/SubmitJobs", func() (engine.Command, error) { return a.submitBatchOf(batch) }},
		{"JobService/CancelJob", func() (engine.Command, error) { return &Cancel{JobID: job}, checkJobID(job) }},
		{"JobService/RetryJob", func() (engine.Command, error) { return &Retry{JobID: job}, checkJobID(job) }},
		{"AdminService/CreateQueue", func() (engine.Command, error) {
			return &CreateQueue{Name: queue, MaxRetries: MaxMaxRetries, TTLNs: MaxTTLSeconds * 1e9}, checkQueueName("name", queue)
		}},
		{"AdminService/DeleteQueue", func() (engine.Command, error) {
			return &DeleteQueue{Name: queue, Force: true}, checkQueueName("name", queue)
		}},
		{"AdminService/PauseQueue", func() (engine.Command, error) { return &PauseQueue{Name: queue}, checkQueueName("name", queue) }},
		{"AdminService/ResumeQueue", func() (engine.Command, error) { return &ResumeQueue{Name: queue}, checkQueueName("name", queue) }},
		{"WorkerService/Heartbeat", func() (engine.Command, error) {
			return &Heartbeat{Worker: worker, LeaseNs: a.leaseNs}, checkWorkerID(worker)
		}},
		{"WorkerService/AckJob", func() (engine.Command, error) { return &Ack{JobID: job, Worker: worker}, checkWorkerID(worker) }},
		{"WorkerService/ReportResult", func() (engine.Command, error) {
			msg := apitest.Longest(MaxErrorLen)
			return &Report{JobID: job, Worker: worker, Result: make([]byte, MaxPayloadBytes), Error: msg}, checkErrorMessage(msg)
		}},
		{"WorkerService/Deregister", func() (engine.Command, error) { return &Release{Worker: worker}, checkWorkerID(worker) }},
		{"WorkerService/StreamJobs", func() (engine.Command, error) {
			return &Lease{Queue: queue, Worker: worker, Max: MaxLeaseBatch, LeaseNs: a.leaseNs}, checkWorkerID(worker)
		}},
	} {
		cmd, err := c.build()
		mustOK(err)
		b, err := cmd.AppendBinary(nil)
		if err != nil {
			t.Fatalf("%s: %v", c.rpc, err)
		}
		if len(b) > api.MaxCommandBytes || len(b)+api.EnvelopeReserve > cmdlog.MaxEntryBytes {
			t.Errorf("%s: the worst legal request makes a %d-byte command; a log entry holds %d with its envelope", c.rpc, len(b), cmdlog.MaxEntryBytes)
		}
		t.Logf("%s: %d bytes at most", c.rpc, len(b))
	}
}

// A batch whose jobs are each within the payload limit but add up past
// the batch's limit is refused as too large, naming the limit and the
// size, before any job id is drawn.
func TestSubmitBatchTotalLimit(t *testing.T) {
	a := edgeAPI()
	for _, n := range []int{17, MaxSubmitBatch} {
		reqs := make([]*jqpb.SubmitJobRequest, n)
		for i := range reqs {
			reqs[i] = &jqpb.SubmitJobRequest{QueueName: "default", Payload: make([]byte, MaxPayloadBytes)}
		}
		_, err := a.submitBatchOf(reqs)
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "4194304") {
			t.Errorf("%d jobs of %d bytes: %v, want RESOURCE_EXHAUSTED naming the limit 4194304", n, MaxPayloadBytes, err)
		}
	}
}

// FuzzFieldRules: what each field's rule accepts is printable text within
// the field's length (names: no path either), and the machine accepts it
// too, so nothing the edge lets through is refused later for its shape.
func FuzzFieldRules(f *testing.F) {
	for _, s := range []string{"default", "w-1", "é", "a\tb", "a\x00b", "invoice\u202efdp.exe", "../x", "a/b", ".", "a..b", "\xff",
		"line\nline", strings.Repeat("q", MaxNameLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules := []struct {
			name   string
			err    error
			min    int
			max    int
			isName bool
			free   bool
		}{
			{"queue", checkQueueName("queue_name", s), 1, MaxNameLen, true, false},
			{"worker", checkWorkerID(s), 1, MaxIDLen, true, false},
			{"job", checkJobID(s), 1, MaxIDLen, false, false},
			{"key", checkIdempotencyKey(s), 0, MaxKeyLen, false, false},
			{"hostname", checkHostname(s), 0, MaxNameLen, false, false},
			{"error_message", checkErrorMessage(s), 0, MaxErrorLen, false, true},
		}
		for _, r := range rules {
			if r.err != nil {
				if connect.CodeOf(r.err) != connect.CodeInvalidArgument {
					t.Fatalf("%s %q refused with %v, want INVALID_ARGUMENT", r.name, s, r.err)
				}
				continue
			}
			if len(s) < r.min || len(s) > r.max || !utf8.ValidString(s) {
				t.Fatalf("%s %q accepted: %d bytes, want %d to %d of UTF-8", r.name, s, len(s), r.min, r.max)
			}
			if r.free {
				if strings.ContainsRune(s, 0) {
					t.Fatalf("%s %q accepted with NUL", r.name, s)
				}
				continue
			}
			for _, c := range s {
				if c < 0x20 || 0x7f <= c && c <= 0x9f || api.IsBidiControl(c) {
					t.Fatalf("%s %q accepted with U+%04X", r.name, s, c)
				}
			}
			if r.isName && (strings.ContainsAny(s, `/\`) || strings.Contains(s, "..") || s == ".") {
				t.Fatalf("%s %q accepted, a path", r.name, s)
			}
		}
		if checkQueueName("queue_name", s) == nil && validName("queue name", s) != "" {
			t.Fatalf("queue %q passes the edge and the machine refuses it: %s", s, validName("queue name", s))
		}
	})
}
