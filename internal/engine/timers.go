package engine

import (
	"container/heap"
	"sort"
)

type timerKey struct {
	workload uint8
	id       string
}

type timer struct {
	workload uint8
	id       string
	atNs     int64
	data     []byte // the encoded command to apply when due
	gen      uint64
	// queued: its entry is in the heap (popDue takes it out while its
	// FromTimer record is on its way).
	queued bool
}

type timerRef struct {
	atNs int64
	key  timerKey
	gen  uint64
}

// timerTable is the partition's durable timer set (rebuilt exactly by
// snapshot + replay) plus a min-heap used only to find the next due one.
// The heap is lazily pruned: entries whose gen no longer matches are stale.
// Stale entries leave the heap at its top, so one cancelled long before
// its time stayed until then: every finished job with a TTL (a day, or up
// to a year) left one, about 100 B each, under a single timer further
// ahead. Once stale entries outnumber the live ones the heap is rebuilt
// from the live timers (compact), which costs O(1) per cancel amortized.
type timerTable struct {
	byKey map[timerKey]*timer
	due   timerHeap
	gen   uint64
}

func newTimerTable() timerTable { return timerTable{byKey: make(map[timerKey]*timer)} }

func (t *timerTable) set(wl uint8, id string, atNs int64, data []byte) {
	t.gen++
	k := timerKey{wl, id}
	t.byKey[k] = &timer{workload: wl, id: id, atNs: atNs, data: data, gen: t.gen, queued: true}
	heap.Push(&t.due, timerRef{atNs: atNs, key: k, gen: t.gen})
	t.compact()
}

func (t *timerTable) cancel(wl uint8, id string) {
	delete(t.byKey, timerKey{wl, id})
	t.compact()
}

func (t *timerTable) take(wl uint8, id string) *timer {
	k := timerKey{wl, id}
	tm := t.byKey[k]
	if tm != nil {
		delete(t.byKey, k)
		t.compact()
	}
	return tm
}

// compactSlack is how many stale heap entries are left before any
// rebuild: a small heap is not worth rebuilding.
const compactSlack = 1024

// compact rebuilds the heap from the queued live timers once it holds
// more than twice as many entries as there are timers. A timer popDue
// took out (its record on its way) is not put back.
func (t *timerTable) compact() {
	if len(t.due) <= 2*len(t.byKey)+compactSlack {
		return
	}
	due := make(timerHeap, 0, len(t.byKey)+len(t.byKey)/4)
	for k, tm := range t.byKey {
		if tm.queued {
			due = append(due, timerRef{atNs: tm.atNs, key: k, gen: tm.gen})
		}
	}
	heap.Init(&due)
	t.due = due
}

// next returns the earliest live deadline, pruning stale heap entries.
func (t *timerTable) next() (int64, bool) {
	for len(t.due) > 0 {
		r := t.due[0]
		if tm := t.byKey[r.key]; tm != nil && tm.gen == r.gen {
			return r.atNs, true
		}
		heap.Pop(&t.due)
	}
	return 0, false
}

// popDue removes and returns the keys of up to max live timers due at
// nowNs whose FromTimer records fit in maxBytes.
// They stay in byKey until their FromTimer record is applied, so a crash
// before that fires them again after restart.
func (t *timerTable) popDue(nowNs int64, dst []timerKey, max, maxBytes int) []timerKey {
	size := 0
	for len(dst) < max {
		at, ok := t.next()
		if !ok || at > nowNs {
			return dst
		}
		size += timerRecordBytes(t.due[0].key.id)
		if size > maxBytes {
			return dst
		}
		r := heap.Pop(&t.due).(timerRef)
		t.byKey[r.key].queued = false // live: next found it so
		dst = append(dst, r.key)
	}
	return dst
}

// timerRecordBytes is the size of the FromTimer record of timer id.
func timerRecordBytes(id string) int { return envHeader + 2 + len(id) }

func (t *timerTable) sorted() []*timer {
	out := make([]*timer, 0, len(t.byKey))
	for _, tm := range t.byKey {
		out = append(out, tm)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].workload != out[j].workload {
			return out[i].workload < out[j].workload
		}
		return out[i].id < out[j].id
	})
	return out
}

type timerHeap []timerRef

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].atNs != h[j].atNs {
		return h[i].atNs < h[j].atNs
	}
	return h[i].key.id < h[j].key.id
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerRef)) }
func (h *timerHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
