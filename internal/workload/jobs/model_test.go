package jobs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// allowed lists the transitions of the compat doc plus the issue's
// additions, written out again here rather than taken from Allowed, so a
// wrong rule in the machine cannot approve itself.
var allowed = map[[2]Status]bool{
	{StatusUnspecified, Pending}: true, // submit
	{Pending, Assigned}:          true,
	{Assigned, Running}:          true, // ack (issue)
	{Running, Done}:              true,
	{Running, Failed}:            true,
	{Assigned, Done}:             true, // jq workers report without ack (issue)
	{Assigned, Failed}:           true,
	{Failed, Pending}:            true, // retry after backoff, or manual
	{Failed, DeadLettered}:       true, // retries exhausted, or cancel while waiting
	{Pending, DeadLettered}:      true, // TTL, cancel
	{Assigned, DeadLettered}:     true, // cancel, lease expired with no retry left
	{Assigned, Pending}:          true, // lease expired (issue)
	{Running, Pending}:           true, // lease expired (issue)
	{Running, DeadLettered}:      true, // cancelled running job ends, or expired with no retry left
	{Running, Running}:           true, // cancel requested (issue): recorded, status kept
	{Assigned, Assigned}:         true, // offered again on the worker's new stream (issue 17)
	{DeadLettered, Pending}:      true, // manual retry
}

type model struct {
	h        *harness
	queues   []string
	workers  []string
	idgen    *rand.ChaCha8
	seen     map[string]int64  // job → newest event id checked
	last     map[string]Status // job → status when last seen
	leasedBy map[string]string // job → worker, from lease replies
	queueOf  map[string]string // job → queue
	keys     map[string]string // queue+idempotency key → job
	// ended counts JobEnded notes not yet matched by a transition.
	ended map[string]int
	// transitions counts what happened, over all seeds.
	transitions map[[2]Status]int
}

func TestModel(t *testing.T) {
	seeds, steps := 12, 1200
	if testing.Short() {
		seeds = 4
	}
	// JOBS_MODEL_SEEDS=n runs n seeds of 5,000 steps: a soak, by hand.
	if v, err := strconv.Atoi(os.Getenv("JOBS_MODEL_SEEDS")); err == nil && v > 0 {
		seeds, steps = v, 5000
	}
	seen := map[[2]Status]int{}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, steps, seen) })
	}
	// Every listed transition happened somewhere: a rule the random mix
	// never reaches is not tested by it.
	for tr := range allowed {
		if seen[tr] == 0 {
			t.Errorf("transition %s → %s never happened (seen: %v)", tr[0], tr[1], seen)
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int, transitions map[[2]Status]int) {
	h := newHarness(t, seed, 3, Limits{MaxJobsPerQueue: 60, MaxFinished: 20})
	var s [32]byte
	s[0] = byte(seed)
	md := &model{h: h, queues: []string{DefaultQueue, "q1", "q2"}, workers: []string{"w1", "w2", "w3"},
		idgen: rand.NewChaCha8(s), seen: map[string]int64{}, last: map[string]Status{}, transitions: transitions,
		leasedBy: map[string]string{}, keys: map[string]string{}, queueOf: map[string]string{}, ended: map[string]int{}}
	h.OnApply = md.observe
	for _, q := range md.queues[1:] {
		if r := h.Client(QueueKey(q), &CreateQueue{Name: q, MaxRetries: int32(1 + seed%3)}); r.Outcome != Created {
			t.Fatalf("create %s: %+v", q, r)
		}
	}
	for i := range steps {
		md.step()
		md.checkAll()
		if i%300 == 299 {
			h.CheckReplay()
		}
	}
	h.CheckReplay()
	// Everything submitted is accounted for, and a long quiet time ends
	// every job that no worker holds.
	for range 48 * 6 {
		h.Advance(int64(600e9))
		md.checkAll()
	}
}

func (md *model) rndJob() string {
	h := md.h
	var ids []string
	for id := range md.last {
		ids = append(ids, id)
	}
	if len(ids) == 0 || h.Rng.IntN(20) == 0 {
		return "no-such-job"
	}
	sort.Strings(ids)
	return ids[h.Rng.IntN(len(ids))]
}

func (md *model) step() {
	h := md.h
	q := md.queues[h.Rng.IntN(len(md.queues))]
	w := md.workers[h.Rng.IntN(len(md.workers))]
	switch k := h.Rng.IntN(100); {
	case k < 28:
		id, err := NewJobID(q, h.N, md.idgen)
		if err != nil {
			h.T.Fatal(err)
		}
		sub := &Submit{JobID: id, Queue: q, Payload: []byte(id[:4]), Priority: int32(h.Rng.IntN(10)),
			RetentionNs: int64(3600e9)}
		if h.Rng.IntN(4) == 0 {
			sub.NotBeforeNs = h.Now + h.Rng.Int64N(int64(60e9))
		}
		if h.Rng.IntN(5) == 0 {
			sub.TTLNs = int64(1+h.Rng.IntN(120)) * 1e9
		}
		if h.Rng.IntN(4) == 0 {
			sub.IdempotencyKey = fmt.Sprint("k", h.Rng.IntN(10))
		}
		if h.Rng.IntN(6) == 0 {
			sub.MaxRetries = int32(h.Rng.IntN(4))
		}
		if h.Rng.IntN(3) == 0 {
			sub.MaxHeldBytes = int64(40 + h.Rng.IntN(200)) // 10 to 60 of the 4-byte payloads
		}
		if h.Part(JobKey(id)) != h.Part(QueueKey(q)) {
			h.T.Fatalf("NewJobID(%q) = %q in partition %d, queue in %d", q, id, h.Part(JobKey(id)), h.Part(QueueKey(q)))
		}
		if h.Rng.IntN(4) > 0 {
			md.checkSubmit(sub, h.Client(QueueKey(q), sub))
			return
		}
		// A batch: the first job and copies with fresh ids.
		b := &SubmitBatch{Jobs: []Submit{*sub}}
		for range h.Rng.IntN(4) {
			s2 := *sub
			if s2.JobID, err = NewJobID(q, h.N, md.idgen); err != nil {
				h.T.Fatal(err)
			}
			s2.Priority = int32(h.Rng.IntN(10))
			b.Jobs = append(b.Jobs, s2)
		}
		qu := h.Machines[h.Part(QueueKey(q))].queues[q]
		before, held := qu.unfinished(), qu.jobs
		r := h.Client(QueueKey(q), b)
		if r.Outcome == Exhausted {
			// All or nothing: refused whole, and only when the new jobs
			// would not fit.
			if len(r.Each) != 0 || qu.jobs != held || before+len(b.Jobs) <= 60 {
				h.T.Fatalf("batch of %d onto %d unfinished jobs refused as %s, now %d jobs", len(b.Jobs), before, r.Msg, qu.jobs)
			}
			return
		}
		if len(r.Each) != len(b.Jobs) {
			h.T.Fatalf("batch of %d: %+v", len(b.Jobs), r)
		}
		for i := range b.Jobs {
			md.checkSubmit(&b.Jobs[i], r.Each[i])
		}
	case k < 45:
		h.Client(QueueKey(q), &Lease{Queue: q, Worker: w, Max: int32(1 + h.Rng.IntN(4)), LeaseNs: int64(10+h.Rng.IntN(30)) * 1e9,
			Session: md.session(w)})
	case k < 55:
		id := md.leasedJob()
		h.Client(JobKey(id), &Ack{JobID: id, Worker: md.holder(id, w)})
	case k < 72:
		id := md.leasedJob()
		h.Client(JobKey(id), &Report{JobID: id, Worker: md.holder(id, w), Success: h.Rng.IntN(3) > 0, Error: "boom"})
	case k < 74 && h.Rng.IntN(3) == 0:
		// A worker going away gives back one job or all it holds.
		if h.Rng.IntN(2) == 0 {
			id := md.leasedJob()
			h.Client(JobKey(id), &Release{Worker: md.holder(id, w), JobID: id})
		} else {
			for p := range h.N {
				data, _ := (&Release{Worker: w}).AppendBinary(nil)
				h.Apply(p, engine.FromClient, "", data)
			}
		}
	case k < 76:
		var cmd engine.Command
		switch h.Rng.IntN(3) {
		case 0:
			cmd = &Heartbeat{Worker: w, LeaseNs: 20e9} // as logs before sessions hold
		case 1:
			cmd = &Extend{Worker: w, Session: md.session(w), LeaseNs: 20e9}
		default:
			cmd = &Extend{Worker: w, LeaseNs: 20e9, Declared: true, JobIDs: []string{md.leasedJob(), md.leasedJob()}}
		}
		for p := range h.N {
			data, _ := cmd.AppendBinary(nil)
			h.Apply(p, engine.FromClient, "", data)
		}
	case k < 78:
		// A stream of w opens (a restart or a reconnect): it keeps some
		// of w's jobs, gives back the others or is offered them again.
		cmd := &Reclaim{Worker: w, Session: md.session(w), LeaseNs: 20e9, Declared: h.Rng.IntN(2) == 0,
			Keep: []string{md.leasedJob()}}
		for p := range h.N {
			data, _ := cmd.AppendBinary(nil)
			h.Apply(p, engine.FromClient, "", data)
		}
		if id := md.leasedJob(); h.Rng.IntN(2) == 0 {
			h.Client(JobKey(id), &Unsent{Worker: md.holder(id, w), Session: md.session(w), JobIDs: []string{id}})
		}
	case k < 81:
		id := md.rndJob()
		if h.Rng.IntN(2) == 0 {
			id = md.leasedJob() // running jobs are the rarer case
		}
		h.Client(JobKey(id), &Cancel{JobID: id})
	case k < 85:
		id := md.rndJob()
		h.Client(JobKey(id), &Retry{JobID: id})
	case k < 89:
		if q != DefaultQueue && h.Rng.IntN(3) == 0 {
			force := h.Rng.IntN(2) == 0
			r := h.Client(QueueKey(q), &DeleteQueue{Name: q, Force: force})
			if r.Outcome == OK {
				// Its jobs went with it, by request.
				for id := range md.last {
					if j, ok := md.lookup(id); !ok && md.queueOf[id] == q {
						delete(md.last, id)
					} else if ok && j.Queue == q {
						h.T.Fatalf("job %s outlived its deleted queue", id)
					}
				}
				if r := h.Client(QueueKey(q), &CreateQueue{Name: q, MaxRetries: 2}); r.Outcome != Created {
					h.T.Fatalf("recreate %s: %+v", q, r)
				}
			}
		} else if h.Rng.IntN(2) == 0 {
			h.Client(QueueKey(q), &PauseQueue{Name: q})
		} else {
			h.Client(QueueKey(q), &ResumeQueue{Name: q})
		}
	default:
		h.Advance(h.Rng.Int64N(int64(40e9)))
	}
}

// session is one of a few stream sessions of worker w.
func (md *model) session(w string) string { return w + "/s" + strconv.Itoa(md.h.Rng.IntN(3)) }

// leasedJob is usually a job some worker holds.
func (md *model) leasedJob() string {
	var ids []string
	for id := range md.last {
		if j, ok := md.lookup(id); ok && (j.Status == Assigned || j.Status == Running) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 || md.h.Rng.IntN(6) == 0 {
		return md.rndJob()
	}
	sort.Strings(ids)
	return ids[md.h.Rng.IntN(len(ids))]
}

// holder is usually the worker holding the job, sometimes another.
func (md *model) holder(id, w string) string {
	if hw, ok := md.leasedBy[id]; ok && md.h.Rng.IntN(5) > 0 {
		return hw
	}
	return w
}

func (md *model) checkSubmit(sub *Submit, r *Result) {
	t := md.h.T
	ik := sub.Queue + "\x00" + sub.IdempotencyKey
	prev, repeat := md.keys[ik]
	if sub.IdempotencyKey != "" && repeat {
		if _, alive := md.lookup(prev); alive {
			if r.Outcome != Same || len(r.Jobs) != 1 || r.Jobs[0].ID != prev {
				t.Fatalf("repeat of key %q: %+v, want job %s unchanged", sub.IdempotencyKey, r, prev)
			}
			return
		}
	}
	switch r.Outcome {
	case Created:
		md.queueOf[sub.JobID] = sub.Queue
		if sub.IdempotencyKey != "" {
			md.keys[ik] = sub.JobID
		}
	case Exhausted:
		// A refusal for the payloads' limit is checked as it is applied
		// (observe).
		if q := md.h.Machines[md.h.Part(QueueKey(sub.Queue))].queues[sub.Queue]; q.unfinished() < 60 && sub.MaxHeldBytes == 0 {
			t.Fatalf("submit refused as exhausted with %d unfinished jobs: %s", q.unfinished(), r.Msg)
		}
	default:
		t.Fatalf("submit: %+v", r)
	}
}

func (md *model) lookup(id string) (*Job, bool) {
	for _, m := range md.h.Machines {
		if j := m.job(id); j != nil {
			return j, true
		}
	}
	return nil, false
}

// observe checks each applied input's visible effects.
func (md *model) observe(p int, cmd engine.Command, res *Result, notes []any) {
	t := md.h.T
	now := md.h.Now
	m := md.h.Machines[p]
	switch c := cmd.(type) {
	case *Lease:
		q := m.queues[c.Queue]
		if res.Outcome == OK && q.Paused {
			t.Fatalf("a paused queue leased %d jobs", len(res.Jobs))
		}
		for i, j := range res.Jobs {
			if j.NotBefore > now {
				t.Fatalf("leased %s before its not_before", j.ID)
			}
			if i > 0 && !before(res.Jobs[i-1], j) {
				t.Fatalf("lease order: %s (p%d #%d) before %s (p%d #%d)", res.Jobs[i-1].ID, res.Jobs[i-1].Priority, res.Jobs[i-1].Seq, j.ID, j.Priority, j.Seq)
			}
			md.leasedBy[j.ID] = c.Worker
		}
		if q.Paused {
			return
		}
		// Nothing left ready may rank before the last job leased, and a
		// short lease leaves nothing ready.
		for _, j := range m.jobs {
			if j.Queue != c.Queue || !j.Ready(now) {
				continue
			}
			if len(res.Jobs) < int(c.Max) {
				t.Fatalf("lease of %d gave %d, but %s (ready) was left", c.Max, len(res.Jobs), j.ID)
			}
			if lastJ := res.Jobs[len(res.Jobs)-1]; before(j, lastJ) {
				t.Fatalf("lease took %s but left %s, which ranks before it", lastJ.ID, j.ID)
			}
		}
	case *Submit:
		// Taken within the limit; refused only past it or the queue's.
		switch {
		case res.Outcome == Created && c.MaxHeldBytes > 0 && m.payloads > c.MaxHeldBytes:
			t.Fatalf("submit taken with its partition's payloads at %d bytes, over the limit %d", m.payloads, c.MaxHeldBytes)
		case res.Outcome == Exhausted && m.queues[c.Queue].unfinished() < 60 && m.payloads+int64(len(c.Payload)) <= c.MaxHeldBytes:
			t.Fatalf("submit refused with %d bytes of payloads held, under its limit %d: %s", m.payloads, c.MaxHeldBytes, res.Msg)
		}
	case *Report:
		if res.Outcome == OK && md.leasedBy[c.JobID] != c.Worker {
			t.Fatalf("report by %s accepted for a job leased to %s", c.Worker, md.leasedBy[c.JobID])
		}
	}
	for _, n := range notes {
		if e, ok := n.(JobEnded); ok {
			md.ended[e.JobID]++
		}
		if qr, ok := n.(QueueReady); ok && (qr.Ready <= 0 || m.queues[qr.Queue] == nil || m.queues[qr.Queue].Paused) {
			t.Fatalf("QueueReady %+v", qr)
		}
	}
}

// before: a ranks before b in dispatch order.
func before(a, b *Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Seq < b.Seq
}

// checkAll checks every job of every partition after a step.
func (md *model) checkAll() {
	h := md.h
	t := h.T
	now := h.Now
	found := map[string]bool{}
	for p, m := range h.Machines {
		var counts = map[string]*[numStatuses]int64{}
		for id, j := range m.allJobs() {
			if found[id] {
				t.Fatalf("job %s in two partitions", id)
			}
			found[id] = true
			if p != h.Part(JobKey(id)) {
				t.Fatalf("job %s held by partition %d, routed to %d", id, p, h.Part(JobKey(id)))
			}
			if j.RetryCount > j.MaxRetries {
				t.Fatalf("job %s: %d retries, max %d", id, j.RetryCount, j.MaxRetries)
			}
			if (j.heapIdx >= 0) != (j.Status == Pending && j.NotBefore <= now) {
				t.Fatalf("job %s (%s, not_before in %d ns) ready=%v", id, j.Status, j.NotBefore-now, j.heapIdx >= 0)
			}
			if (j.Status == Assigned || j.Status == Running) != (j.Worker != "") {
				t.Fatalf("job %s %s with worker %q", id, j.Status, j.Worker)
			}
			if j.Status == Pending && j.TTLNs > 0 && now >= j.TTLFrom+j.TTLNs {
				t.Fatalf("job %s pending past its TTL", id)
			}
			c := counts[j.Queue]
			if c == nil {
				c = new([numStatuses]int64)
				counts[j.Queue] = c
			}
			c[j.Status]++
			// Transitions since the last check.
			prev := md.seen[id]
			st, known := md.last[id]
			if !known {
				st = StatusUnspecified
			}
			for _, e := range j.Events {
				if e.ID <= prev {
					continue
				}
				if e.From != st || !allowed[[2]Status{e.From, e.To}] {
					t.Fatalf("job %s: transition %s → %s (%s), last seen %s", id, e.From, e.To, e.Reason, st)
				}
				if e.To.Finished() && e.From != e.To {
					if md.ended[id] == 0 {
						t.Fatalf("job %s ended %s without a JobEnded note", id, e.To)
					}
					md.ended[id]--
				}
				st = e.To
				md.seen[id] = e.ID
				md.transitions[[2]Status{e.From, e.To}]++
			}
			if st != j.Status {
				t.Fatalf("job %s is %s, its log ends at %s", id, j.Status, st)
			}
			if len(j.Events) > MaxEventsPerJob {
				t.Fatalf("job %s holds %d events", id, len(j.Events))
			}
			md.last[id] = j.Status
		}
		for name, q := range m.queues {
			c := counts[name]
			if c == nil {
				c = new([numStatuses]int64)
			}
			if q.counts != *c {
				t.Fatalf("queue %s counts %v, jobs say %v", name, q.counts, *c)
			}
		}
	}
	for id, n := range md.ended {
		if n != 0 {
			t.Fatalf("job %s: %d JobEnded notes with no end", id, n)
		}
	}
	// Finished jobs are counted right and kept under the cap (the oldest
	// ended go early past it).
	for p, m := range md.h.Machines {
		n := 0
		for _, j := range m.allJobs() {
			if j.Status.Finished() {
				n++
			}
		}
		if n != m.finished || n > m.opts.Limits.MaxFinished {
			t.Fatalf("partition %d holds %d finished jobs, counted %d, cap %d", p, n, m.finished, m.opts.Limits.MaxFinished)
		}
		// The payload bytes a submit's limit is checked against are
		// those of the unfinished jobs (live, or pending records).
		var payloads int64
		for _, j := range m.allJobs() {
			if !j.Status.Finished() || m.jobs[j.ID] != nil {
				payloads += int64(len(j.Payload))
			}
		}
		if payloads != m.payloads {
			t.Fatalf("partition %d counts %d bytes of payloads; its jobs hold %d", p, m.payloads, payloads)
		}
	}
	// No job lost: what is gone was finished (and past its retention, or
	// the oldest-ended past the cap).
	for id, st := range md.last {
		if !found[id] {
			if !st.Finished() {
				t.Fatalf("job %s vanished while %s", id, st)
			}
			delete(md.last, id)
		}
	}
}
