package jobs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// The worker model drives the machine the way the API does for worker
// processes that crash, restart under the same id or a new one, lose
// their streams, lose pushes and heartbeat, and checks after every step:
//
//   - no job is leased past its lease after the last event that covered
//     it: its push, the new stream that kept or offered it again, a
//     heartbeat that named it, or one that came while the stream holding
//     it was its worker's live stream (the timers fire as time passes, so
//     a lease past due is a lease extended by something else);
//   - right after a stream opens, its worker id holds only jobs that
//     stream's process has (a restarted process has none of its
//     predecessor's): no job takes a slot no process uses;
//   - in the end every acknowledged job finishes.
//
// The model's bookkeeping (who holds what, which session pushed what) is
// its own, from the replies the API would see, not read from the machine.

const wmLease = int64(30e9)

type wproc struct {
	id       string
	declares bool // Surge's worker: lists what it holds
	session  string
	live     bool            // its stream is open
	holds    map[string]bool // jobs pushed to it and not reported
}

type workerModel struct {
	h       *harness
	rng     *rand.Rand
	idgen   *rand.ChaCha8
	queues  []string
	procs   map[string]*wproc // worker id → its process, nil once it died
	ids     []string          // every worker id used
	nextID  int
	nextSes int
	// bound: job → latest time its lease may last, from covers.
	bound map[string]int64
	// session: job → the session the model last saw it pushed or offered on.
	session map[string]string
	owner   map[string]string // job → worker id, from replies
	acked   []string          // submitted jobs, in order
}

func TestWorkerModel(t *testing.T) {
	seeds, steps := 16, 1500
	if testing.Short() {
		seeds = 4
	}
	if v, err := strconv.Atoi(os.Getenv("JOBS_MODEL_SEEDS")); err == nil && v > 0 {
		seeds, steps = v, 5000
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runWorkerModel(t, seed, steps) })
	}
}

func runWorkerModel(t *testing.T, seed uint64, steps int) {
	h := newHarness(t, seed, 3, Limits{MaxJobsPerQueue: 200, MaxFinished: 1 << 20})
	var s [32]byte
	s[0] = byte(seed)
	wm := &workerModel{h: h, rng: h.Rng, idgen: rand.NewChaCha8(s), queues: []string{DefaultQueue, "q1"},
		procs: map[string]*wproc{}, bound: map[string]int64{}, session: map[string]string{}, owner: map[string]string{}}
	if r := h.Client(QueueKey("q1"), &CreateQueue{Name: "q1", MaxRetries: 5}); r.Outcome != Created {
		t.Fatal(r.Msg)
	}
	for range 3 {
		wm.start(wm.newID())
	}
	for i := range steps {
		wm.step()
		wm.checkLeases()
		if i%500 == 499 {
			h.CheckReplay()
		}
	}
	h.CheckReplay()
	wm.finish()
}

func (wm *workerModel) newID() string {
	wm.nextID++
	id := fmt.Sprintf("w%d", wm.nextID)
	wm.ids = append(wm.ids, id)
	return id
}

// all applies a client command on every partition, as the API does.
func (wm *workerModel) all(mk func(p int) engine.Command) []*Result {
	out := make([]*Result, wm.h.N)
	for p := range wm.h.N {
		data, err := mk(p).AppendBinary(nil)
		if err != nil {
			wm.h.T.Fatal(err)
		}
		out[p] = wm.h.Apply(p, engine.FromClient, "", data)
	}
	return out
}

// byPart splits job ids by partition.
func (wm *workerModel) byPart(ids []string) [][]string {
	per := make([][]string, wm.h.N)
	for _, id := range ids {
		p := wm.h.Part(JobKey(id))
		per[p] = append(per[p], id)
	}
	return per
}

func sortedKeys(m map[string]bool) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (wm *workerModel) cover(id string) {
	wm.bound[id] = max(wm.bound[id], wm.h.Now+wmLease)
}

// start opens a stream for id: a new process (restart) if none lives,
// else the same process reconnecting.
func (wm *workerModel) start(id string) {
	p := wm.procs[id]
	if p == nil {
		p = &wproc{id: id, declares: wm.rng.IntN(2) == 0, holds: map[string]bool{}}
		wm.procs[id] = p
	}
	wm.nextSes++
	p.session, p.live = fmt.Sprintf("s%d", wm.nextSes), true
	per := wm.byPart(sortedKeys(p.holds))
	res := wm.all(func(q int) engine.Command {
		return &Reclaim{Worker: id, Session: p.session, LeaseNs: wmLease, Declared: p.declares, Keep: per[q]}
	})
	for _, r := range res {
		for _, j := range r.Jobs {
			wm.session[j.ID], wm.owner[j.ID] = p.session, id
			wm.cover(j.ID)
			if !p.declares {
				p.holds[j.ID] = true // sent again on the new stream
			}
		}
	}
	// The id holds nothing its process does not have.
	for q, m := range wm.h.Machines {
		for _, jid := range m.Query(WorkerJobs{Worker: id}).([]string) {
			if !p.holds[jid] {
				wm.h.T.Fatalf("after %s opened session %s (declares %v), partition %d leases it %s, which its process does not hold",
					id, p.session, p.declares, q, jid)
			}
		}
	}
}

func (wm *workerModel) live() []*wproc {
	var out []*wproc
	for _, id := range wm.ids {
		if p := wm.procs[id]; p != nil {
			out = append(out, p)
		}
	}
	return out
}

func (wm *workerModel) pick() *wproc {
	ps := wm.live()
	if len(ps) == 0 {
		return nil
	}
	return ps[wm.rng.IntN(len(ps))]
}

func (wm *workerModel) held(p *wproc) string {
	ids := sortedKeys(p.holds)
	if len(ids) == 0 {
		return ""
	}
	return ids[wm.rng.IntN(len(ids))]
}

func (wm *workerModel) step() {
	h := wm.h
	p := wm.pick()
	switch k := wm.rng.IntN(100); {
	case k < 22:
		q := wm.queues[wm.rng.IntN(len(wm.queues))]
		id, err := NewJobID(q, h.N, wm.idgen)
		if err != nil {
			h.T.Fatal(err)
		}
		sub := &Submit{JobID: id, Queue: q, MaxRetries: int32(wm.rng.IntN(4)), RetentionNs: int64(3600e9) * 100}
		if r := h.Client(QueueKey(q), sub); r.Outcome == Created {
			wm.acked = append(wm.acked, id)
		}
	case k < 40 && p != nil && p.live:
		wm.push(p, wm.rng.IntN(8) == 0)
	case k < 48 && p != nil:
		if id := wm.held(p); id != "" {
			h.Client(JobKey(id), &Ack{JobID: id, Worker: p.id})
		}
	case k < 62 && p != nil:
		if id := wm.held(p); id != "" {
			h.Client(JobKey(id), &Report{JobID: id, Worker: p.id, Success: wm.rng.IntN(4) > 0, Error: "boom"})
			delete(p.holds, id)
		}
	case k < 74 && p != nil:
		wm.beat(p)
	case k < 78 && p != nil:
		// The process dies (kill -9), sometimes with a push on its way.
		if p.live && wm.rng.IntN(2) == 0 {
			wm.push(p, true)
		}
		wm.procs[p.id] = nil
	case k < 81 && p != nil:
		p.live = false // the stream breaks; the process goes on
	case k < 86:
		// A worker (re)connects: a lost stream, a restart under its id,
		// or a new id.
		switch {
		case p != nil && !p.live:
			wm.start(p.id)
		case wm.rng.IntN(3) == 0:
			wm.start(wm.newID())
		default:
			id := wm.ids[wm.rng.IntN(len(wm.ids))]
			if wm.procs[id] == nil {
				wm.start(id)
			}
		}
	case k < 88:
		if len(wm.acked) > 0 {
			id := wm.acked[wm.rng.IntN(len(wm.acked))]
			h.Client(JobKey(id), &Cancel{JobID: id})
		}
	default:
		h.Advance(wm.rng.Int64N(int64(25e9)))
	}
}

// push leases for p's stream; lost: the process never gets them (it
// dies first, or the send fails and the API gives them back).
func (wm *workerModel) push(p *wproc, lost bool) {
	h := wm.h
	q := wm.queues[wm.rng.IntN(len(wm.queues))]
	r := h.Client(QueueKey(q), &Lease{Queue: q, Worker: p.id, Max: int32(1 + wm.rng.IntN(3)), LeaseNs: wmLease, Session: p.session})
	var ids []string
	for _, j := range r.Jobs {
		wm.session[j.ID], wm.owner[j.ID] = p.session, p.id
		wm.bound[j.ID] = h.Now + wmLease
		ids = append(ids, j.ID)
		if !lost {
			p.holds[j.ID] = true
		}
	}
	switch {
	case !lost || len(ids) == 0:
	case wm.rng.IntN(2) == 0:
		// The send failed: the API knows, and gives them back.
		h.Client(QueueKey(q), &Unsent{Worker: p.id, Session: p.session, JobIDs: ids})
		p.live = false
	default:
		// Sent into a stream that broke before the process read it.
		p.live = false
	}
}

func (wm *workerModel) beat(p *wproc) {
	session := ""
	if p.live {
		session = p.session
	}
	ids := sortedKeys(p.holds)
	per := wm.byPart(ids)
	wm.all(func(q int) engine.Command {
		if p.declares {
			return &Extend{Worker: p.id, LeaseNs: wmLease, Declared: true, JobIDs: per[q]}
		}
		return &Extend{Worker: p.id, Session: session, LeaseNs: wmLease}
	})
	// What this heartbeat may cover, by the model's own books.
	for jid, w := range wm.owner {
		if w != p.id {
			continue
		}
		if (p.declares && p.holds[jid]) || (!p.declares && session != "" && wm.session[jid] == session) {
			wm.cover(jid)
		}
	}
}

// checkLeases: every lease ends by its bound, and none is past due.
func (wm *workerModel) checkLeases() {
	h := wm.h
	for _, m := range h.Machines {
		for id, j := range m.jobs {
			if j.Status != Assigned && j.Status != Running {
				continue
			}
			if b, ok := wm.bound[id]; !ok || j.LeaseUntil > b {
				h.T.Fatalf("job %s leased to %s until %d, %d ns past the last cover the model knows", id, j.Worker, j.LeaseUntil, j.LeaseUntil-b)
			}
			if j.LeaseUntil <= h.Now {
				h.T.Fatalf("job %s is still leased %d ns after its lease ended", id, h.Now-j.LeaseUntil)
			}
			if wm.owner[id] != j.Worker {
				h.T.Fatalf("job %s leased to %s; the model saw it go to %s", id, j.Worker, wm.owner[id])
			}
		}
	}
}

// finish: the processes that are left run and report what they hold, a
// healthy new worker takes the rest, and every acknowledged job ends.
func (wm *workerModel) finish() {
	h := wm.h
	for _, q := range wm.queues {
		h.Client(QueueKey(q), &ResumeQueue{Name: q})
	}
	final := wm.newID()
	wm.start(final)
	for round := range 400 {
		for _, p := range wm.live() {
			if !p.live {
				wm.start(p.id)
			}
			if p.id == final {
				for range 5 {
					wm.push(p, false)
				}
			}
			for _, id := range sortedKeys(p.holds) {
				h.Client(JobKey(id), &Report{JobID: id, Worker: p.id, Success: true})
				delete(p.holds, id)
			}
			wm.beat(p)
		}
		wm.checkLeases()
		if wm.unfinished() == nil {
			return
		}
		if round%10 == 9 {
			h.CheckReplay()
		}
		h.Advance(int64(20e9))
	}
	h.T.Fatalf("jobs left unfinished: %v", wm.unfinished())
}

func (wm *workerModel) unfinished() []string {
	var out []string
	for _, id := range wm.acked {
		j := wm.h.Machines[wm.h.Part(JobKey(id))].job(id)
		if j == nil {
			wm.h.T.Fatalf("acknowledged job %s vanished", id)
		}
		if !j.Status.Finished() {
			pr := wm.procs[j.Worker]
			out = append(out, fmt.Sprintf("%s=%s worker %s session %s until %d now %d proc %+v", id, j.Status, j.Worker, j.Session, j.LeaseUntil, wm.h.Now, pr))
		}
	}
	return slices.Clip(out)
}
