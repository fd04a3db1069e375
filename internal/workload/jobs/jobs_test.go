package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func TestNewJobIDRoutesToTheQueuePartition(t *testing.T) {
	rnd := rand.NewChaCha8([32]byte{1})
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, n := range []int{1, 2, 7, 64} {
		for _, q := range []string{"default", "emails", "q-17"} {
			for range 20 {
				id, err := NewJobID(q, n, rnd)
				if err != nil {
					t.Fatal(err)
				}
				if !uuid.MatchString(id) || seen[id] {
					t.Fatalf("id %q: not a fresh v4 UUID", id)
				}
				seen[id] = true
				if got, want := engine.PartitionOfHash(engine.Hash(JobKey(id)), n), engine.PartitionOfHash(engine.Hash(QueueKey(q)), n); got != want {
					t.Fatalf("NewJobID(%q, %d) = %s in partition %d, queue in %d", q, n, id, got, want)
				}
			}
		}
	}
	if _, err := NewJobID("q", 4, strings.NewReader("short")); err == nil {
		t.Fatal("a reader that runs dry gave an id")
	}
	if _, err := NewJobID("q", 0, rnd); err == nil {
		t.Fatal("0 partitions gave an id")
	}
}

func TestBackoff(t *testing.T) {
	for n := range int32(12) {
		base := min(int64(5e9)<<min(n, 10), int64(300e9))
		varies := false
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			b := Backoff(id, n)
			if b < base || b > base+base/4 {
				t.Fatalf("Backoff(%q, %d) = %d, want %d to %d", id, n, b, base, base+base/4)
			}
			if b != Backoff(id, n) {
				t.Fatal("Backoff is not a function of its arguments")
			}
			varies = varies || b != Backoff("a", n)
		}
		if !varies {
			t.Fatalf("retry %d: no jitter between jobs", n)
		}
	}
}

// one runs a single partition that owns the default queue.
func one(t *testing.T) *harness { return newHarness(t, 1, 1, Limits{MaxJobsPerQueue: 5, MaxQueues: 3}) }

func (h *harness) notes(cmd engine.Command) (*Result, []any) {
	var got []any
	prev := h.OnApply
	h.OnApply = func(_ int, _ engine.Command, _ *Result, n []any) { got = n }
	defer func() { h.OnApply = prev }()
	return h.Client("", cmd), got
}

func TestDefaultQueue(t *testing.T) {
	w := &Workload{Partitions: 4}
	owners := 0
	for p := range 4 {
		if qs := w.NewMachine(p).Query(ListQueues{}).([]*Queue); len(qs) == 1 && qs[0].Name == DefaultQueue {
			owners++
		}
	}
	if owners != 1 {
		t.Fatalf("%d partitions hold the default queue", owners)
	}
	h := one(t)
	if r := h.Client("", &DeleteQueue{Name: DefaultQueue, Force: true}); r.Outcome != Conflict {
		t.Fatalf("delete default: %+v", r)
	}
	if r := h.Client("", &Submit{JobID: "j", Queue: "nope"}); r.Outcome != NotFound {
		t.Fatalf("submit to an unknown queue: %+v", r)
	}
}

func TestRefusalsChangeNothing(t *testing.T) {
	h := one(t)
	before := h.Machines[0].AppendSnapshot(nil)
	for _, c := range []struct {
		cmd  engine.Command
		want Outcome
	}{
		{&Submit{JobID: "j", Queue: DefaultQueue, Priority: 10}, Invalid},
		{&Submit{JobID: "j", Queue: DefaultQueue, Priority: -1}, Invalid},
		{&Submit{JobID: "j", Queue: DefaultQueue, MaxRetries: -1}, Invalid},
		{&Submit{JobID: "", Queue: DefaultQueue}, Invalid},
		{&Submit{JobID: "j", Queue: DefaultQueue, Payload: make([]byte, MaxPayloadBytes+1)}, Exhausted},
		{&CreateQueue{Name: ""}, Invalid},
		{&CreateQueue{Name: "x", MaxRetries: -1}, Invalid},
		{&Lease{Queue: DefaultQueue, Worker: "w", Max: 0, LeaseNs: 1}, Invalid},
		{&Lease{Queue: DefaultQueue, Worker: "", Max: 1, LeaseNs: 1}, Invalid},
		{&Ack{JobID: "nope", Worker: "w"}, NotFound},
		{&Cancel{JobID: "nope"}, NotFound},
		{&Retry{JobID: "nope"}, NotFound},
		{&LeaseExpired{JobID: "nope"}, Invalid}, // a timer command from a client
		{&PurgeJobs{}, Invalid},
	} {
		if r := h.Client("", c.cmd); r.Outcome != c.want {
			t.Errorf("%T%+v: %v %s, want %v", c.cmd, c.cmd, r.Outcome, r.Msg, c.want)
		}
	}
	if len(h.Log[0]) != 0 {
		t.Fatalf("%d refusals were logged", len(h.Log[0]))
	}
	if after := h.Machines[0].AppendSnapshot(nil); string(after) != string(before) {
		t.Fatal("a refusal changed the state")
	}
	// Limits: jobs per queue, queues per partition.
	for i := range 5 {
		if r := h.Client("", &Submit{JobID: string(rune('a' + i)), Queue: DefaultQueue}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	if r := h.Client("", &Submit{JobID: "z", Queue: DefaultQueue}); r.Outcome != Exhausted {
		t.Fatalf("sixth job of 5: %+v", r)
	}
	h.Client("", &CreateQueue{Name: "q1"})
	h.Client("", &CreateQueue{Name: "q2"})
	if r := h.Client("", &CreateQueue{Name: "q3"}); r.Outcome != Exhausted {
		t.Fatalf("fourth queue of 3: %+v", r)
	}
	if r := h.Client("", &DeleteQueue{Name: DefaultQueue + "x"}); r.Outcome != NotFound {
		t.Fatalf("delete unknown: %+v", r)
	}
}

func TestIdempotencyKey(t *testing.T) {
	h := one(t)
	r1 := h.Client("", &Submit{JobID: "j1", Queue: DefaultQueue, IdempotencyKey: "k"})
	logged := len(h.Log[0])
	r2 := h.Client("", &Submit{JobID: "j2", Queue: DefaultQueue, IdempotencyKey: "k"})
	if r1.Outcome != Created || r2.Outcome != Same || r2.Jobs[0].ID != "j1" || len(h.Log[0]) != logged {
		t.Fatalf("repeat: %+v then %+v (logged %d → %d)", r1, r2, logged, len(h.Log[0]))
	}
	// Once the job is purged the key is free again.
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e9})
	h.Client("", &Report{JobID: "j1", Worker: "w", Success: true})
	h.Advance(DefaultRetentionNs + 1)
	if j := h.Machines[0].Query(GetJob{ID: "j1"}).(*Job); j != nil {
		t.Fatalf("finished job kept past its retention: %+v", j)
	}
	if r := h.Client("", &Submit{JobID: "j3", Queue: DefaultQueue, IdempotencyKey: "k"}); r.Outcome != Created {
		t.Fatalf("key after purge: %+v", r)
	}
}

func TestRetriesThenDeadLetter(t *testing.T) {
	h := one(t)
	h.Client("", &Submit{JobID: "j", Queue: DefaultQueue, MaxRetries: 2})
	for i := range 3 {
		r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e12})
		if len(r.Jobs) != 1 {
			t.Fatalf("attempt %d: nothing to lease", i)
		}
		h.Client("", &Report{JobID: "j", Worker: "w", Success: false, Error: "exit 1"})
		// Not leasable before its backoff.
		if r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e12}); len(r.Jobs) != 0 {
			t.Fatal("leased during its backoff")
		}
		h.Advance(Backoff("j", int32(i)))
	}
	j := h.Machines[0].Query(GetJob{ID: "j"}).(*Job)
	if j.Status != DeadLettered || j.DeadReason != ReasonExhausted || j.RetryCount != 2 || j.Error != "exit 1" {
		t.Fatalf("after 3 failures with 2 retries: %+v", j)
	}
	if r := h.Client("", &Retry{JobID: "j"}); r.Outcome != OK || r.Jobs[0].Status != Pending || r.Jobs[0].RetryCount != 0 {
		t.Fatalf("manual retry: %+v", r)
	}
	st := h.Machines[0].Query(GetStats{Name: DefaultQueue}).(*Stats)
	if st.Processed != 3 || st.ErrorRate != 1 || st.Pending != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCancelRunningTellsTheWorker(t *testing.T) {
	h := one(t)
	h.Client("", &Submit{JobID: "j", Queue: DefaultQueue})
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 30e9})
	h.Client("", &Ack{JobID: "j", Worker: "w"})
	r, notes := h.notes(&Cancel{JobID: "j"})
	if r.Outcome != OK || len(notes) != 1 || notes[0] != (CancelRequested{JobID: "j", Worker: "w"}) {
		t.Fatalf("cancel: %+v %v", r, notes)
	}
	if r.Jobs[0].Status != Running {
		t.Fatal("a cancelled running job stops only when its worker says so")
	}
	r, notes = h.notes(&Report{JobID: "j", Worker: "w", Success: true})
	j := h.Machines[0].Query(GetJob{ID: "j"}).(*Job)
	if r.Outcome != OK || j.Status != DeadLettered || j.DeadReason != ReasonCancelled || len(notes) != 1 || notes[0] != (JobEnded{JobID: "j", Queue: DefaultQueue, Status: DeadLettered}) {
		t.Fatalf("report after cancel: %+v %+v %v", r, j, notes)
	}
	logs := h.Machines[0].Query(GetJobLogs{ID: "j"}).([]JobEvent)
	var reasons []string
	for _, e := range logs {
		reasons = append(reasons, e.Reason)
	}
	if got := strings.Join(reasons, ","); got != "SUBMITTED,LEASED,ACKED,CANCEL_REQUESTED,CANCELLED" {
		t.Fatalf("log %s", got)
	}
}

func TestNotBeforeAndReadyNotes(t *testing.T) {
	h := one(t)
	_, notes := h.notes(&Submit{JobID: "later", Queue: DefaultQueue, NotBeforeNs: h.Now + 10e9})
	if len(notes) != 0 {
		t.Fatalf("a delayed job announced as ready: %v", notes)
	}
	_, notes = h.notes(&Submit{JobID: "now", Queue: DefaultQueue})
	if len(notes) != 1 || notes[0] != (QueueReady{Queue: DefaultQueue, Ready: 1}) {
		t.Fatalf("submit notes %v", notes)
	}
	r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 5, LeaseNs: 1e12})
	if len(r.Jobs) != 1 || r.Jobs[0].ID != "now" {
		t.Fatalf("lease took %+v", r.Jobs)
	}
	var ready []any
	h.OnApply = func(_ int, _ engine.Command, _ *Result, n []any) { ready = append(ready, n...) }
	h.Advance(10e9)
	if len(ready) != 1 || ready[0] != (QueueReady{Queue: DefaultQueue, Ready: 1}) {
		t.Fatalf("not_before reached: %v", ready)
	}
	h.OnApply = nil
	// Paused: leases nothing, and resume announces what waits.
	h.Client("", &PauseQueue{Name: DefaultQueue})
	if r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 5, LeaseNs: 1e12}); len(r.Jobs) != 0 {
		t.Fatal("a paused queue leased")
	}
	if _, notes := h.notes(&ResumeQueue{Name: DefaultQueue}); len(notes) != 1 {
		t.Fatalf("resume notes %v", notes)
	}
}

func TestLeaseExpiryAndHeartbeat(t *testing.T) {
	h := one(t)
	h.Client("", &Submit{JobID: "j", Queue: DefaultQueue, MaxRetries: 1})
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 30e9})
	h.Advance(20e9)
	if r := h.Client("", &Heartbeat{Worker: "w", LeaseNs: 30e9}); r.Outcome != OK {
		t.Fatalf("heartbeat: %+v", r)
	}
	h.Advance(20e9) // 40 s after the lease: alive thanks to the beat
	if j := h.Machines[0].Query(GetJob{ID: "j"}).(*Job); j.Status != Assigned {
		t.Fatalf("after a heartbeat: %s", j.Status)
	}
	h.Advance(11e9)
	j := h.Machines[0].Query(GetJob{ID: "j"}).(*Job)
	if j.Status != Pending || j.RetryCount != 1 || j.Worker != "" {
		t.Fatalf("after expiry: %+v", j)
	}
	if r := h.Client("", &Report{JobID: "j", Worker: "w", Success: true}); r.Outcome != Conflict {
		t.Fatalf("report of an expired lease: %+v", r)
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w2", Max: 1, LeaseNs: 30e9})
	h.Advance(31e9)
	if j := h.Machines[0].Query(GetJob{ID: "j"}).(*Job); j.Status != DeadLettered || j.DeadReason != ReasonLeaseExpired {
		t.Fatalf("second expiry with 1 retry: %+v", j)
	}
}

func TestListJobsPages(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	for i := range 45 {
		h.Client("", &Submit{JobID: string(rune('A' + i)), Queue: DefaultQueue, Priority: int32(i % 10)})
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 10, LeaseNs: 1e12})
	h.Client("", &Cancel{JobID: "B"}) // a hole in the middle of a page is not a problem
	var all []string
	tok := ""
	for pages := 0; ; pages++ {
		p := h.Machines[0].Query(ListJobs{Queue: DefaultQueue, Status: Pending, Limit: 7, PageToken: tok}).(*JobPage)
		if !p.Found || pages > 10 {
			t.Fatalf("page %d: %+v", pages, p)
		}
		for _, j := range p.Jobs {
			if j.Status != Pending {
				t.Fatalf("filter let %s through", j.Status)
			}
			all = append(all, j.ID)
		}
		if tok = p.NextPageToken; tok == "" {
			break
		}
	}
	if len(all) != 34 {
		t.Fatalf("%d pending jobs listed, want 34", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i-1] >= all[i] {
			t.Fatalf("not in submission order: %v", all)
		}
	}
	if p := h.Machines[0].Query(ListJobs{Queue: DefaultQueue, PageToken: "x"}).(*JobPage); p.Found {
		t.Fatal("a bad token was taken")
	}
}

// TestListJobsPagesAreBoundedInBytes: a page fits a jq client built on
// grpc-go, which refuses answers over 4 MiB by default (always one job),
// and the pages still cover every job once, in order.
func TestListJobsPagesAreBoundedInBytes(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	big := make([]byte, MaxPayloadBytes)
	for i := range 8 {
		h.Client("", &Submit{JobID: fmt.Sprint("j", i), Queue: DefaultQueue, Payload: big})
	}
	var seen []string
	tok := ""
	for pages := 0; ; pages++ {
		p := h.Machines[0].Query(ListJobs{Queue: DefaultQueue, Limit: 100, PageToken: tok}).(*JobPage)
		bytes := 0
		for _, j := range p.Jobs {
			bytes += len(j.Payload) + len(j.Result)
			seen = append(seen, j.ID)
		}
		const grpcGoRecv = 4 << 20
		if len(p.Jobs) == 0 || (len(p.Jobs) > 1 && bytes >= grpcGoRecv) || pages > 8 {
			t.Fatalf("page %d: %d jobs, %d bytes; want at least one and under %d bytes", pages, len(p.Jobs), bytes, grpcGoRecv)
		}
		if tok = p.NextPageToken; tok == "" {
			break
		}
	}
	if fmt.Sprint(seen) != "[j0 j1 j2 j3 j4 j5 j6 j7]" {
		t.Fatalf("pages listed %v", seen)
	}
}

func TestDeleteQueue(t *testing.T) {
	h := one(t)
	h.Client("", &CreateQueue{Name: "q"})
	h.Client("", &Submit{JobID: "a", Queue: "q"})
	if r := h.Client("", &DeleteQueue{Name: "q"}); r.Outcome != Conflict {
		t.Fatalf("delete with a pending job: %+v", r)
	}
	h.Client("", &Lease{Queue: "q", Worker: "w", Max: 1, LeaseNs: 1e9})
	if r := h.Client("", &DeleteQueue{Name: "q", Force: true}); r.Outcome != OK {
		t.Fatalf("forced: %+v", r)
	}
	if h.Machines[0].Query(GetJob{ID: "a"}).(*Job) != nil || len(h.Machines[0].leases) != 0 || len(h.Timers[0]) != 0 {
		t.Fatalf("the deleted queue's job, lease or timers remain: %v", h.Timers[0])
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {200}, {tagSubmit}, {tagCancel, 5, 'a'}, {tagCancel, 1, 'a', 0}} {
		if _, err := Decode(b); err == nil {
			t.Errorf("Decode(%x) took it", b)
		}
	}
	if err := NewMachine(Options{}).Restore([]byte{9}); err == nil || errors.Is(err, nil) {
		t.Fatal("snapshot version 9 restored")
	}
}

// TestEventLogBounded: a job sent round the loop many times keeps only
// its newest events, numbered on, and a fork taken midway still encodes
// what it saw while the log keeps trimming.
func TestEventLogBounded(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	// A failure with retries left (queue default 3) then a manual retry:
	// LEASED, FAILED, MANUAL_RETRY per round.
	h.Client("", &Submit{JobID: "j", Queue: DefaultQueue})
	var fork func([]byte) []byte
	var want []byte
	for i := range 60 {
		h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e12})
		h.Client("", &Report{JobID: "j", Worker: "w", Success: false})
		h.Client("", &Retry{JobID: "j"})
		if i == 40 {
			want = h.Machines[0].AppendSnapshot(nil)
			fork = h.Machines[0].ForkSnapshot()
		}
	}
	ev := h.Machines[0].Query(GetJobLogs{ID: "j"}).([]JobEvent)
	if len(ev) != MaxEventsPerJob || ev[len(ev)-1].ID != 1+60*3 {
		t.Fatalf("%d events, newest #%d", len(ev), ev[len(ev)-1].ID)
	}
	for i := 1; i < len(ev); i++ {
		if ev[i].ID != ev[i-1].ID+1 || ev[i].From != ev[i-1].To {
			t.Fatalf("events %d and %d do not follow: %+v %+v", i-1, i, ev[i-1], ev[i])
		}
	}
	if got := fork(nil); string(got) != string(want) {
		t.Fatal("the fork changed with the job's log")
	}
	h.CheckReplay()
}

func TestSubmitBatch(t *testing.T) {
	h := one(t)
	// One bad job refuses the whole batch, which changes nothing.
	r, notes := h.notes(&SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: DefaultQueue}, {JobID: "b", Queue: DefaultQueue, Priority: 12}}})
	if r.Outcome != Invalid || len(notes) != 0 || !strings.Contains(r.Msg, "job 1 of the batch") {
		t.Fatalf("batch with a bad job: %+v, notes %v", r, notes)
	}
	if j := h.Machines[0].Query(GetJob{ID: "a"}).(*Job); j != nil {
		t.Fatalf("a refused batch added %+v", j)
	}
	r, notes = h.notes(&SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: DefaultQueue}, {JobID: "b", Queue: DefaultQueue, Priority: 9},
		{JobID: "c", Queue: DefaultQueue, IdempotencyKey: "k"}, {JobID: "d", Queue: DefaultQueue, IdempotencyKey: "k"}}})
	if len(notes) != 1 || notes[0] != (QueueReady{Queue: DefaultQueue, Ready: 3}) {
		t.Fatalf("batch notes %v", notes)
	}
	want := []Outcome{Created, Created, Created, Same}
	for i, e := range r.Each {
		if e.Outcome != want[i] {
			t.Fatalf("job %d: %v %s, want %v", i, e.Outcome, e.Msg, want[i])
		}
	}
	if r.Outcome != Created || r.Each[3].Jobs[0].ID != "c" {
		t.Fatalf("batch: %+v", r)
	}
	// The same id twice in one batch is refused whole too.
	if r := h.Client("", &SubmitBatch{Jobs: []Submit{{JobID: "e", Queue: DefaultQueue}, {JobID: "e", Queue: DefaultQueue}}}); r.Outcome != Conflict {
		t.Fatalf("id repeated in a batch: %+v", r)
	}
	for _, b := range []*SubmitBatch{{}, {Jobs: []Submit{{JobID: "x", Queue: DefaultQueue}, {JobID: "y", Queue: "other"}}}} {
		if r := h.Client("", b); r.Outcome != Invalid {
			t.Fatalf("%+v: %+v", b, r)
		}
	}
	// An empty Submit decodes inside a batch: the count's bound fits it.
	data, _ := (&SubmitBatch{Jobs: make([]Submit, 3)}).AppendBinary(nil)
	if _, err := Decode(data); err != nil {
		t.Fatal(err)
	}
}

func TestRelease(t *testing.T) {
	h := one(t)
	for _, id := range []string{"a", "b", "c"} {
		h.Client("", &Submit{JobID: id, Queue: DefaultQueue})
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 3, LeaseNs: 1e12})
	h.Client("", &Ack{JobID: "b", Worker: "w"})
	h.Client("", &Cancel{JobID: "b"})
	if r := h.Client("", &Release{Worker: "x", JobID: "a"}); r.Outcome != Conflict {
		t.Fatalf("release by another worker: %+v", r)
	}
	if r := h.Client("", &Release{Worker: "w", JobID: "a"}); r.Outcome != OK || r.Jobs[0].Status != Pending || r.Jobs[0].RetryCount != 0 {
		t.Fatalf("release of a: %+v", r)
	}
	r := h.Client("", &Release{Worker: "w"})
	if r.Outcome != OK || len(r.Jobs) != 2 || r.Jobs[0].ID != "b" || r.Jobs[0].Status != DeadLettered || r.Jobs[1].Status != Pending {
		t.Fatalf("release of all: %+v", r)
	}
	if r := h.Client("", &Release{Worker: "w"}); r.Outcome != Same {
		t.Fatalf("nothing left to release: %+v", r)
	}
	if len(h.Timers[0]) != 1 { // only the purge timer of b
		t.Fatalf("timers left: %v", h.Timers[0])
	}
}

// TestForksEncodeAtOnce: two forks of the same state may be encoded at
// the same time (a periodic snapshot and a cluster hand-over's), and the
// live machine goes on reading its jobs meanwhile. Encoding only reads:
// under -race a write to the shared events would be reported.
func TestForksEncodeAtOnce(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	for i := range 50 {
		id := fmt.Sprintf("j%d", i)
		h.Client("", &Submit{JobID: id, Queue: DefaultQueue})
		h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e12})
	}
	a, b := h.Machines[0].ForkSnapshot(), h.Machines[0].ForkSnapshot()
	want := h.Machines[0].AppendSnapshot(nil)
	var wg sync.WaitGroup
	got := make([][]byte, 2)
	for i, f := range []func([]byte) []byte{a, b} {
		wg.Go(func() { got[i] = f(nil) })
	}
	wg.Go(func() { h.Machines[0].Query(GetJobLogs{ID: "j7"}) })
	wg.Wait()
	for i := range got {
		if !bytes.Equal(got[i], want) {
			t.Errorf("fork %d encoded something else than the state it was taken from", i)
		}
	}
}

// A refusal that passes as jobs finish (a full queue, the partition's
// payload bytes) says so (Result.Later, which the API sends as a retry
// delay); one that never passes (a batch larger than the queue's limit,
// payloads larger than the partition's) does not.
func TestFullRefusalsSayLater(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{MaxJobsPerQueue: 2})
	h.Client("", &CreateQueue{Name: "q"})
	for _, id := range []string{"a", "b"} {
		if r := h.Client("", &Submit{JobID: id, Queue: "q"}); r.Outcome != Created {
			t.Fatalf("submit %s: %+v", id, r)
		}
	}
	for _, tc := range []struct {
		cmd   engine.Command
		later bool
	}{
		{&Submit{JobID: "c", Queue: "q"}, true},
		{&SubmitBatch{Jobs: []Submit{{JobID: "c", Queue: "q"}, {JobID: "d", Queue: "q"}}}, true},
		{&SubmitBatch{Jobs: []Submit{{JobID: "c", Queue: "q"}, {JobID: "d", Queue: "q"}, {JobID: "e", Queue: "q"}}}, false},
		{&Submit{JobID: "c", Queue: "default", Payload: []byte("xx"), MaxHeldBytes: 1}, false},
		{&SubmitBatch{Jobs: []Submit{{JobID: "c", Queue: "default", Payload: []byte("xx")}}, MaxHeldBytes: 1}, false},
	} {
		r := h.Client("", tc.cmd)
		if r.Outcome != Exhausted || r.Later != tc.later {
			t.Errorf("%+v: %v %q, later %v; want Exhausted, later %v", tc.cmd, r.Outcome, r.Msg, r.Later, tc.later)
		}
	}
	h.Client("", &Submit{JobID: "f", Queue: "default", Payload: []byte("x"), MaxHeldBytes: 2})
	if r := h.Client("", &Submit{JobID: "g", Queue: "default", Payload: []byte("xx"), MaxHeldBytes: 2}); r.Outcome != Exhausted || !r.Later {
		t.Errorf("payloads past the partition's limit, of a size that fits it: %v %q, later %v", r.Outcome, r.Msg, r.Later)
	}
}

// A new ready job is noted (QueueReady) only while something listens
// (Options.Listening): without a worker stream the note was an
// allocation per submit for nothing.
func TestReadyNotesOnlyWhileListening(t *testing.T) {
	listening := false
	m := NewMachine(Options{OwnsDefault: true, Listening: func() bool { return listening }})
	for i, want := range []bool{false, true} {
		listening = want
		fx := new(engine.Effects)
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: &Submit{JobID: fmt.Sprint("j", i), Queue: DefaultQueue}}, fx)
		noted := false
		for _, n := range fx.Notes() {
			_, ok := n.(QueueReady)
			noted = noted || ok
		}
		if noted != want {
			t.Errorf("listening %v: noted %v", want, noted)
		}
	}
}
