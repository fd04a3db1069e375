package sequencer

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// The model test drives random publishes (server and client seqs,
// repeated ids, gaps filled later, client seqs out of order), leases by
// several processors, completions in any order, lease expiries, extends,
// releases, commits and purges, and after every step checks each group
// against what the test itself knows was published: the output a reader
// sees is exactly the group's messages in seq order, each once; every
// published message is in exactly one state (or purged after release);
// nothing after a gap is released. Every few hundred steps the harness
// replays the log, restores a snapshot and encodes a fork, and requires
// the same bytes.

// mgroup is what the test knows about one group (one incarnation).
type mgroup struct {
	name   string
	client bool
	pub    map[uint64]string // seq → id, from the publish replies
	ids    map[string]uint64 // id → seq
	// read is the output as a reader saw it, reading after every step.
	read      []uint64
	position  uint64
	nextID    int
	consumers map[string]uint64
}

type model struct {
	h      *harness
	groups map[string]*mgroup
	names  []string
	procs  []string
	// holder: seq → processor, from lease replies (per group).
	holder map[string]map[uint64]string
	counts map[string]int // what happened, over all seeds
}

func TestModel(t *testing.T) {
	seeds, steps := 10, 1500
	if testing.Short() {
		seeds = 3
	}
	// SEQUENCER_MODEL_SEEDS=n runs n seeds of 5,000 steps: a soak, by hand.
	if v, err := strconv.Atoi(os.Getenv("SEQUENCER_MODEL_SEEDS")); err == nil && v > 0 {
		seeds, steps = v, 5000
	}
	counts := map[string]int{}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, steps, counts) })
	}
	t.Logf("cases: %v", counts)
	// Every case the random mix is meant to reach was reached somewhere.
	for _, k := range []string{"publish-server", "publish-client", "repeat", "seq-taken", "seq-released", "mode-mixed",
		"batch", "gap-filled", "expired", "extended", "released-leases", "complete-other", "commit-back", "purged-consumers",
		"purged-retention", "deleted", "released-run", "batch-complete-mixed", "batch-complete-dup"} {
		if counts[k] == 0 {
			t.Errorf("%s never happened (seen: %v)", k, counts)
		}
	}
}

func runModel(t *testing.T, seed uint64, steps int, counts map[string]int) {
	// Odd seeds use chunks of 4 slots, so windows cross chunk boundaries
	// (and forks share and copy chunks) all the time.
	if seed%2 == 1 {
		defer func(s uint) { chunkShift = s }(chunkShift)
		chunkShift = 2
	}
	h := newHarness(t, seed, 3, Limits{MaxUnreleased: 40, MaxConsumers: 2})
	md := &model{h: h, groups: map[string]*mgroup{}, names: []string{"s1", "s2", "c1", "c2"},
		procs: []string{"p1", "p2", "p3"}, holder: map[string]map[uint64]string{}, counts: counts}
	h.OnApply = md.observe
	for _, n := range md.names {
		md.fresh(n)
	}
	for i := range steps {
		md.step()
		md.check()
		md.checkOutput()
		if i%100 == 99 {
			h.CheckReplay()
		}
	}
	h.CheckReplay()
	md.drain()
}

func (md *model) fresh(name string) *mgroup {
	g := &mgroup{name: name, client: name[0] == 'c', pub: map[uint64]string{}, ids: map[string]uint64{}, consumers: map[string]uint64{}}
	md.groups[name] = g
	md.holder[name] = map[uint64]string{}
	return g
}

func (md *model) machineGroup(name string) *Group {
	return md.h.Machines[md.h.Part(GroupKey(name))].groups[name]
}

// publishCmd makes a publish of g: usually a new id; sometimes an id
// used before; client seqs near the released position in any order,
// sometimes one already taken or released.
func (md *model) publishCmd(g *mgroup) *Publish {
	rng := md.h.Rng
	p := &Publish{Group: g.name, Payload: []byte(fmt.Sprint(g.name, "#", g.nextID)), RetentionNs: 3600e9}
	if len(g.ids) > 0 && rng.IntN(8) == 0 {
		ids := slices.Sorted(mapKeys(g.ids))
		p.MsgID = ids[rng.IntN(len(ids))]
	} else {
		g.nextID++
		p.MsgID = fmt.Sprint("m", g.nextID)
	}
	if g.client {
		switch k := rng.IntN(20); {
		case k == 0 && g.position > 0:
			p.Seq = 1 + rng.Uint64N(g.position) // released: refused
		case k == 1:
			p.Seq = g.position + 1 + rng.Uint64N(60) // maybe past the window
		default:
			p.Seq = g.position + 1 + rng.Uint64N(12)
		}
	}
	if rng.IntN(40) == 0 && md.machineGroup(g.name) != nil {
		// The other mode: refused until the group is deleted.
		if p.Seq == 0 {
			p.Seq = g.position + 1
		} else {
			p.Seq = 0
		}
	}
	return p
}

// expectPublish checks a publish's result against the model and records
// what it published.
func (md *model) expectPublish(g *mgroup, p *Publish, r *Result, batchSeen map[string]uint64) {
	t := md.h.T
	mg := md.machineGroup(g.name)
	if seq, ok := g.ids[p.MsgID]; ok && (mg == nil || seq >= mg.base) {
		if r.Outcome != Same || r.Seq != seq {
			t.Fatalf("%s: repeat of %s (seq %d): %+v", g.name, p.MsgID, seq, r)
		}
		md.counts["repeat"]++
		return
	}
	if seq, ok := batchSeen[p.MsgID]; ok {
		if r.Outcome != Same || r.Seq != seq {
			t.Fatalf("%s: id %s repeated in a batch: %+v, want %d", g.name, p.MsgID, r, seq)
		}
		return
	}
	switch r.Outcome {
	case Created:
		if (p.Seq > 0) != g.client {
			t.Fatalf("%s: publish in the wrong mode accepted: %+v", g.name, p)
		}
		if p.Seq > 0 && r.Seq != p.Seq {
			t.Fatalf("%s: client seq %d published as %d", g.name, p.Seq, r.Seq)
		}
		if prev, taken := g.pub[r.Seq]; taken {
			t.Fatalf("%s: seq %d given to %s, already %s's", g.name, r.Seq, p.MsgID, prev)
		}
		if !g.client && r.Seq != uint64(len(g.pub))+1 {
			t.Fatalf("%s: server seq %d after %d messages", g.name, r.Seq, len(g.pub))
		}
		if g.client && r.Seq < g.maxSeq() {
			md.counts["gap-filled"]++
		}
		g.pub[r.Seq] = p.MsgID
		g.ids[p.MsgID] = r.Seq
		if batchSeen != nil {
			batchSeen[p.MsgID] = r.Seq
		}
		md.counts["publish-"+map[bool]string{false: "server", true: "client"}[g.client]]++
	case Invalid:
		if (p.Seq > 0) == g.client {
			t.Fatalf("%s: %+v refused: %s", g.name, p, r.Msg)
		}
		md.counts["mode-mixed"]++
	case Conflict:
		if !g.client || p.Seq == 0 {
			t.Fatalf("%s: %+v refused: %s", g.name, p, r.Msg)
		}
		if p.Seq <= g.position {
			md.counts["seq-released"]++
		} else if _, taken := g.pub[p.Seq]; taken {
			md.counts["seq-taken"]++
		} else if batchSeen == nil {
			t.Fatalf("%s: seq %d refused as taken: %s", g.name, p.Seq, r.Msg)
		}
	case Exhausted:
		want := p.Seq
		if want == 0 && mg != nil {
			want = mg.last() + 1
		}
		if want-g.position <= 40 && batchSeen == nil {
			t.Fatalf("%s: seq %d refused at position %d: %s", g.name, p.Seq, g.position, r.Msg)
		}
	default:
		t.Fatalf("%s: publish %+v: %+v", g.name, p, r)
	}
}

func (g *mgroup) maxSeq() uint64 {
	var m uint64
	for s := range g.pub {
		m = max(m, s)
	}
	return m
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (md *model) step() {
	h := md.h
	rng := h.Rng
	name := md.names[rng.IntN(len(md.names))]
	g := md.groups[name]
	key := GroupKey(name)
	proc := md.procs[rng.IntN(len(md.procs))]
	switch k := rng.IntN(100); {
	case k < 25:
		p := md.publishCmd(g)
		md.expectPublish(g, p, h.Client(key, p), nil)
	case k < 30:
		b := &PublishBatch{}
		for range 1 + rng.IntN(6) {
			b.Msgs = append(b.Msgs, *md.publishCmd(g))
		}
		r := h.Client(key, b)
		if r.Outcome != Created && r.Outcome != Same {
			// All or nothing: a refused batch published nothing; some
			// message of it must be refusable alone.
			if len(r.Each) != 0 {
				h.T.Fatalf("refused batch with results: %+v", r)
			}
			return
		}
		md.counts["batch"]++
		seen := map[string]uint64{}
		for i := range b.Msgs {
			md.expectPublish(g, &b.Msgs[i], r.Each[i], seen)
		}
	case k < 45:
		h.Client(key, &Lease{Group: name, Processor: proc, Max: int32(1 + rng.IntN(5)), LeaseNs: int64(5+rng.IntN(30)) * 1e9})
	case k < 58:
		seq, holder := md.leased(name)
		if rng.IntN(6) == 0 {
			holder = proc
		}
		h.Client(key, &Complete{Group: name, Seq: seq, Processor: holder})
	case k < 68:
		md.completeBatch(g)
	case k < 71:
		h.Client(key, &Extend{Group: name, Processor: proc, LeaseNs: int64(10+rng.IntN(30)) * 1e9})
	case k < 73:
		h.Client(key, &Release{Group: name, Processor: proc})
	case k < 80:
		consumer := fmt.Sprint("k", rng.IntN(3)) // a third is over the limit
		pos := uint64(0)
		if g.position > 0 {
			pos = rng.Uint64N(g.position + 1)
			if rng.IntN(2) == 0 {
				pos = g.position
			}
		}
		if rng.IntN(15) == 0 {
			pos = g.position + 1 + rng.Uint64N(3)
		}
		md.expectCommit(g, consumer, pos, h.Client(key, &Commit{Group: name, Consumer: consumer, Position: pos}))
	case k < 81 && rng.IntN(4) == 0:
		existed := md.machineGroup(name) != nil
		r := h.Client(key, &DeleteGroup{Group: name})
		if (r.Outcome == OK) != existed || (r.Outcome != OK && r.Outcome != NotFound) {
			h.T.Fatalf("delete %s (existed: %v): %+v", name, existed, r)
		}
		if r.Outcome == OK {
			md.counts["deleted"]++
			md.fresh(name)
		}
	case k < 97:
		h.Advance(rng.Int64N(int64(20e9)))
	default:
		// Past the retention: released messages go even unread by a consumer.
		h.Advance(3600e9 + rng.Int64N(int64(60e9)))
	}
}

// completeBatch sends a CompleteBatch of mostly one processor's leased
// seqs, mixed with seqs leased to others, unknown or released ones, 0
// and repeats, and checks each result against what the model knew
// before: OK exactly for the processor's leases (the first time each
// is named), Same for a processed, released or repeated one.
func (md *model) completeBatch(g *mgroup) {
	h := md.h
	rng := h.Rng
	_, proc := md.leased(g.name)
	if rng.IntN(8) == 0 {
		proc = md.procs[rng.IntN(len(md.procs))]
	}
	var seqs []uint64
	for range 1 + rng.IntN(8) {
		switch k := rng.IntN(10); {
		case k < 6:
			seq, _ := md.leased(g.name)
			seqs = append(seqs, seq)
		case k < 8 && len(seqs) > 0:
			seqs = append(seqs, seqs[rng.IntN(len(seqs))])
		case k < 9:
			seqs = append(seqs, 1+rng.Uint64N(g.position+50))
		default:
			seqs = append(seqs, 0)
		}
	}
	mg := md.machineGroup(g.name)
	want := make([]Outcome, len(seqs))
	done := map[uint64]bool{}
	for i, seq := range seqs {
		var x *msg
		if mg != nil {
			x = mg.at(seq)
		}
		_, published := g.pub[seq]
		switch {
		case seq == 0:
			want[i] = Invalid
		case done[seq] || (mg != nil && seq < mg.base):
			want[i] = Same
		case md.holder[g.name][seq] == proc:
			want[i], done[seq] = OK, true
		case !published:
			want[i] = NotFound
		case x != nil && (x.State == MsgProcessed || x.State == MsgReleased):
			want[i] = Same
		default:
			want[i] = Conflict
		}
	}
	r := h.Client(GroupKey(g.name), &CompleteBatch{Group: g.name, Processor: proc, Seqs: seqs})
	if mg == nil {
		if r.Outcome != NotFound || r.Each != nil {
			h.T.Fatalf("%s: a batch to no group: %+v", g.name, r)
		}
		return
	}
	if len(r.Each) != len(seqs) {
		h.T.Fatalf("%s: %d results for %d seqs: %+v", g.name, len(r.Each), len(seqs), r)
	}
	var anyOK, refused, dup bool
	for i, e := range r.Each {
		if e.Outcome != want[i] {
			h.T.Fatalf("%s: batch %v by %s: seq %d is %s (%s), want %s", g.name, seqs, proc, seqs[i], e.Outcome, e.Msg, want[i])
		}
		anyOK = anyOK || e.Outcome == OK
		refused = refused || (e.Outcome != OK && e.Outcome != Same)
		first := slices.Index(seqs, seqs[i])
		dup = dup || (e.Outcome == Same && first < i && want[first] == OK)
	}
	if anyOK != (r.Outcome == OK) || r.Position != md.machineGroup(g.name).position {
		h.T.Fatalf("%s: batch %v: %+v", g.name, seqs, r)
	}
	if anyOK && refused {
		md.counts["batch-complete-mixed"]++
	}
	if dup {
		md.counts["batch-complete-dup"]++
	}
}

// leased is usually a message some processor holds (and its holder).
func (md *model) leased(name string) (uint64, string) {
	hs := md.holder[name]
	if len(hs) == 0 || md.h.Rng.IntN(10) == 0 {
		return 1 + md.h.Rng.Uint64N(50), "p1"
	}
	seqs := slices.Sorted(mapKeys(hs))
	s := seqs[md.h.Rng.IntN(len(seqs))]
	return s, hs[s]
}

func (md *model) expectCommit(g *mgroup, consumer string, pos uint64, r *Result) {
	t := md.h.T
	old, known := g.consumers[consumer]
	switch {
	case md.machineGroup(g.name) == nil:
		if r.Outcome != NotFound {
			t.Fatalf("commit to no group: %+v", r)
		}
	case pos > g.position:
		if r.Outcome != Invalid {
			t.Fatalf("commit past the position %d accepted: %+v", g.position, r)
		}
	case known && pos < old:
		if r.Outcome != Conflict {
			t.Fatalf("commit back from %d to %d: %+v", old, pos, r)
		}
		md.counts["commit-back"]++
	case known && pos == old:
		if r.Outcome != Same {
			t.Fatalf("commit again at %d: %+v", pos, r)
		}
	case !known && len(g.consumers) >= 2:
		if r.Outcome != Exhausted {
			t.Fatalf("a third consumer: %+v", r)
		}
	default:
		if r.Outcome != OK {
			t.Fatalf("commit %s at %d: %+v", consumer, pos, r)
		}
		g.consumers[consumer] = pos
	}
}

// observe checks each applied input's visible effects.
func (md *model) observe(p int, cmd engine.Command, res *Result, notes []any) {
	t := md.h.T
	m := md.h.Machines[p]
	switch c := cmd.(type) {
	case *Lease:
		for i, x := range res.Messages {
			if i > 0 && x.Seq <= res.Messages[i-1].Seq {
				t.Fatalf("lease out of seq order: %d after %d", x.Seq, res.Messages[i-1].Seq)
			}
			md.holder[c.Group][x.Seq] = c.Processor
		}
		// Nothing left leasable ranks before the last one leased, and a
		// short lease left nothing.
		if g := m.groups[c.Group]; g != nil && res.Outcome == OK {
			for seq := g.base; seq <= g.last(); seq++ {
				if g.at(seq).State == MsgPending && (len(res.Messages) < int(c.Max) || seq < res.Messages[len(res.Messages)-1].Seq) {
					t.Fatalf("lease of %d gave %v but left %d", c.Max, res.Messages, seq)
				}
			}
		}
	case *Complete:
		if res.Outcome == OK {
			if md.holder[c.Group][c.Seq] != c.Processor {
				t.Fatalf("complete of %d by %s accepted; leased to %q", c.Seq, c.Processor, md.holder[c.Group][c.Seq])
			}
			delete(md.holder[c.Group], c.Seq)
		} else if res.Outcome == Conflict && md.holder[c.Group][c.Seq] != c.Processor {
			md.counts["complete-other"]++
		}
	case *CompleteBatch:
		for i, e := range res.Each {
			if e.Outcome == OK {
				if md.holder[c.Group][c.Seqs[i]] != c.Processor {
					t.Fatalf("batch completion of %d by %s accepted; leased to %q", c.Seqs[i], c.Processor, md.holder[c.Group][c.Seqs[i]])
				}
				delete(md.holder[c.Group], c.Seqs[i])
			}
		}
		// One Released note for the whole run, however many it released.
		n := 0
		for _, note := range notes {
			if _, ok := note.(Released); ok {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("batch %v: %d Released notes", c.Seqs, n)
		}
	case *Extend:
		if res.Outcome == OK {
			md.counts["extended"]++
		}
	case *Release:
		if res.Outcome == OK {
			md.counts["released-leases"]++
		}
	case *Commit:
		if res.Msg != "" {
			md.counts["purged-consumers"]++
		}
	case *PurgeMessages:
		if res.Msg != "purged 0" {
			md.counts["purged-retention"]++
		}
	case *LeaseExpired:
		if res.Outcome == OK {
			md.counts["expired"]++
		}
	}
	for _, n := range notes {
		switch n := n.(type) {
		case Ready:
			if g := m.groups[n.Group]; g == nil || n.N != len(g.pending) || n.N == 0 {
				t.Fatalf("Ready %+v", n)
			}
		case Released:
			if g := m.groups[n.Group]; g == nil || n.Position != g.position {
				t.Fatalf("Released %+v", n)
			}
		}
	}
	if res.Outcome != OK && res.Outcome != Created && len(notes) > 0 {
		t.Fatalf("%T %s with notes %v", cmd, res.Outcome, notes)
	}
}

// check compares every group with the model after a step.
func (md *model) check() {
	h := md.h
	t := h.T
	for _, name := range md.names {
		mg := md.groups[name]
		g := md.machineGroup(name)
		if g == nil {
			if len(mg.pub) > 0 {
				t.Fatalf("group %s vanished with %d messages", name, len(mg.pub))
			}
			continue
		}
		// Holders the machine no longer agrees with: expired or released.
		for seq, p := range md.holder[name] {
			if x := g.at(seq); x == nil || x.State != MsgLeased || x.Processor != p {
				delete(md.holder[name], seq)
			}
		}
		// The reader: everything released since its last read, in order.
		out := h.Machines[h.Part(GroupKey(name))].Query(ReadOutput{Group: name, After: mg.lastRead(), Limit: 1000}).(*Output)
		if !out.Found || out.Position != g.position {
			t.Fatalf("%s: read %+v", name, out)
		}
		if out.FirstKept > mg.lastRead()+1 {
			t.Fatalf("%s: read after %d starts at %d: released messages purged unread", name, mg.lastRead(), out.FirstKept)
		}
		for _, x := range out.Messages {
			want := mg.lastRead() + 1
			if x.Seq != want || x.ID != mg.pub[x.Seq] || x.State != MsgReleased {
				t.Fatalf("%s: output %d (%s, %s) where %d (%s) was due", name, x.Seq, x.ID, x.State, want, mg.pub[want])
			}
			if !bytes.HasPrefix(x.Payload, []byte(name+"#")) || !(x.Created <= x.Processing && x.Processing <= x.Processed && x.Processed <= x.Released) {
				t.Fatalf("%s: output %d: %+v", name, x.Seq, x)
			}
			mg.read = append(mg.read, x.Seq)
		}
		if int(mg.lastRead()) != len(mg.read) || mg.lastRead() != g.position {
			t.Fatalf("%s: read %d messages up to %d, position %d", name, len(mg.read), mg.lastRead(), g.position)
		}
		if g.position > mg.position+1 {
			md.counts["released-run"]++
		}
		mg.position = g.position
		// Every slot is what the model published, in one state.
		var counts [numStates]int
		pending := map[uint64]bool{}
		for _, s := range g.pending {
			pending[s] = true
		}
		leased := map[uint64]string{}
		for p, s := range g.leases {
			for seq := range s {
				leased[seq] = p
			}
		}
		for seq := g.base; seq <= g.last(); seq++ {
			x := g.at(seq)
			counts[x.State]++
			id, published := mg.pub[seq]
			switch {
			case (x.State == MsgGap) == published:
				t.Fatalf("%s: slot %d is %s, published=%v", name, seq, x.State, published)
			case x.State != MsgGap && x.ID != id:
				t.Fatalf("%s: slot %d holds %s, %s was published there", name, seq, x.ID, id)
			case (seq <= g.position) != (x.State == MsgReleased):
				t.Fatalf("%s: slot %d is %s at position %d", name, seq, x.State, g.position)
			case pending[seq] != (x.State == MsgPending):
				t.Fatalf("%s: slot %d is %s, in the pending heap: %v", name, seq, x.State, pending[seq])
			case (leased[seq] != "") != (x.State == MsgLeased) || leased[seq] != x.Processor:
				t.Fatalf("%s: slot %d is %s by %q, lease index says %q", name, seq, x.State, x.Processor, leased[seq])
			}
			if x.State == MsgLeased && x.LeaseUntil <= h.Now {
				t.Fatalf("%s: slot %d leased past its lease", name, seq)
			}
		}
		if len(pending) != len(g.pending) || counts != g.counts {
			t.Fatalf("%s: counts %v, slots say %v; heap %d", name, g.counts, counts, len(g.pending))
		}
		var kept, held int64
		for seq := g.base; seq <= g.last(); seq++ {
			switch x := g.at(seq); {
			case seq <= g.position:
				kept += outCost(x)
			case x.State != MsgGap:
				held += outCost(x)
			}
		}
		if kept != g.out || held != g.held {
			t.Fatalf("%s: its kept output counted %d, unreleased %d; its messages cost %d and %d", name, g.out, g.held, kept, held)
		}
		// The release is maximal: the message after the position is not
		// processed (else it would have gone out).
		if x := g.at(g.position + 1); x != nil && x.State == MsgProcessed {
			t.Fatalf("%s: %d processed but held at position %d", name, g.position+1, g.position)
		}
		// Published messages missing from the window were released,
		// read, and then passed by every consumer or retained long
		// enough; their ids are forgotten.
		for seq, id := range mg.pub {
			if seq >= g.base {
				continue
			}
			if seq > g.position || seq > mg.lastRead() {
				t.Fatalf("%s: message %d purged before it was read", name, seq)
			}
			if g.ids[id] == seq {
				t.Fatalf("%s: purged message %d's id still known", name, seq)
			}
		}
		if len(g.ids) != int(g.last()-g.base+1)-counts[MsgGap] {
			t.Fatalf("%s: %d ids for %d messages", name, len(g.ids), int(g.last()-g.base+1)-counts[MsgGap])
		}
		// Purging: kept released messages are not all passed by every
		// consumer and not all past their retention (the front one is
		// neither).
		if g.base <= g.position {
			x := g.at(g.base)
			low, consumed := g.minCommitted()
			if consumed && low >= g.base {
				t.Fatalf("%s: %d kept though every consumer passed it", name, g.base)
			}
			if x.Released+x.RetentionNs <= h.Now-int64(3700e9) {
				t.Fatalf("%s: %d kept long past its retention", name, g.base)
			}
		}
	}
}

// checkOutput: each partition counts what its groups' kept output costs.
func (md *model) checkOutput() {
	for p, m := range md.h.Machines {
		var out, held int64
		for _, g := range m.groups {
			out += g.out
			held += g.held
		}
		if out != m.out || m.out > m.opts.Limits.MaxOutputBytes || held != m.held {
			md.h.T.Fatalf("partition %d counts %d bytes of output (its groups %d, limit %d) and %d unreleased (its groups %d)",
				p, m.out, out, m.opts.Limits.MaxOutputBytes, m.held, held)
		}
	}
}

func (g *mgroup) lastRead() uint64 {
	if len(g.read) == 0 {
		return 0
	}
	return g.read[len(g.read)-1]
}

// drain fills every gap, processes everything and requires each group's
// output, as read, to be exactly its messages in seq order, each once.
func (md *model) drain() {
	h := md.h
	t := h.T
	for _, name := range md.names {
		mg := md.groups[name]
		g := md.machineGroup(name)
		if g == nil {
			continue
		}
		if mg.client {
			for seq := g.position + 1; seq <= g.last(); seq++ {
				if _, ok := mg.pub[seq]; !ok {
					p := &Publish{Group: name, MsgID: fmt.Sprint("fill", seq), Seq: seq, Payload: []byte(name + "#fill"), RetentionNs: 3600e9}
					md.expectPublish(mg, p, h.Client(GroupKey(name), p), nil)
				}
			}
		}
		h.Client(GroupKey(name), &Release{Group: name, Processor: "p1"})
		h.Client(GroupKey(name), &Release{Group: name, Processor: "p2"})
		h.Client(GroupKey(name), &Release{Group: name, Processor: "p3"})
		for {
			r := h.Client(GroupKey(name), &Lease{Group: name, Processor: "last", Max: MaxLeaseBatch, LeaseNs: 1e9})
			if r.Outcome != OK {
				break
			}
			// Completed in reverse: the whole run goes out with the last,
			// one by one for some groups, in one batch for the others.
			var seqs []uint64
			for i := len(r.Messages) - 1; i >= 0; i-- {
				if name[1] == '1' {
					seqs = append(seqs, r.Messages[i].Seq)
				} else {
					h.Client(GroupKey(name), &Complete{Group: name, Seq: r.Messages[i].Seq, Processor: "last"})
				}
			}
			if len(seqs) > 0 {
				if b := h.Client(GroupKey(name), &CompleteBatch{Group: name, Processor: "last", Seqs: seqs}); b.Outcome != OK || b.Position < seqs[0] {
					t.Fatalf("%s: drain batch %v: %+v", name, seqs, b)
				}
			}
		}
		md.check()
		md.checkOutput()
		if mg.lastRead() != g.last() {
			t.Fatalf("%s: drained to %d, last seq %d", name, mg.lastRead(), g.last())
		}
		seqs := slices.Sorted(mapKeys(mg.pub))
		if !slices.Equal(seqs, mg.read) {
			t.Fatalf("%s: published %v, read %v", name, seqs, mg.read)
		}
	}
	// Past every retention, all released output goes.
	h.Advance(2 * 3600e9)
	for _, name := range md.names {
		if g := md.machineGroup(name); g != nil && (g.counts[MsgReleased] != 0 || len(g.ids) != 0) {
			t.Fatalf("%s: %d released messages and %d ids kept after their retention", name, g.counts[MsgReleased], len(g.ids))
		}
	}
}
