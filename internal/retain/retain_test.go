package retain

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

type entry struct {
	at int64
	id string
}

func (e entry) Due() int64 { return e.at }

func contents(q *Queue[entry]) []entry { return slices.Collect(q.All()) }

// check compares q with the model: length, order, front and back.
func check(t *testing.T, step int, q *Queue[entry], model []entry) {
	t.Helper()
	if q.Len() != len(model) {
		t.Fatalf("step %d: Len %d, model %d", step, q.Len(), len(model))
	}
	if step%100 == 0 || len(model) < 64 {
		if got := contents(q); !slices.Equal(got, model) {
			t.Fatalf("step %d: queue holds %d entries unlike the model's %d", step, len(got), len(model))
		}
	}
	f, okf := q.Front()
	b, okb := q.Back()
	at, okn := q.Next()
	if len(model) == 0 {
		if okf || okb || okn {
			t.Fatalf("step %d: empty queue has a front or back", step)
		}
		return
	}
	if f != model[0] || b != model[len(model)-1] || !okf || !okb || !okn || at != model[0].at {
		t.Fatalf("step %d: front %v back %v next %d, model %v..%v", step, f, b, at, model[0], model[len(model)-1])
	}
}

// TestQueueMatchesAFIFO drives a queue and a plain slice with the same
// random operations, across chunk boundaries and empty spells, and
// checks every view taken on the way still holds what it held when
// taken, while a goroutine reads it as a snapshot encoder would (run
// with -race).
func TestQueueMatchesAFIFO(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var q Queue[entry]
		var model []entry
		type view struct {
			q    Queue[entry]
			want []entry
		}
		var views []view
		var wg sync.WaitGroup
		now, id := int64(0), 0
		for step := range 2000 {
			switch op := rng.IntN(100); {
			case op < 55:
				for range 1 + rng.IntN(3*chunkLen/2*int(seed%2)+1) {
					id++
					e := entry{at: now + rng.Int64N(50), id: string(rune('a'+id%26)) + string(rune(id))}
					if q.Push(e) != (len(model) == 0) {
						t.Fatalf("step %d: Push's wasEmpty wrong", step)
					}
					model = append(model, e)
				}
			case op < 75:
				v, ok := q.Pop()
				if ok != (len(model) > 0) || (ok && v != model[0]) {
					t.Fatalf("step %d: Pop = %v, %v; model %v", step, v, ok, model)
				}
				if ok {
					model = model[1:]
				}
			case op < 93:
				now += rng.Int64N(30)
				limit := 1 + rng.IntN(2*chunkLen)
				var dropped []entry
				n := q.PopDue(now, limit, func(e entry) { dropped = append(dropped, e) })
				want := 0
				for want < len(model) && want < limit && model[want].at <= now {
					want++
				}
				if n != want || !slices.Equal(dropped, model[:want]) {
					t.Fatalf("step %d: PopDue(%d, %d) dropped %d %v, want the first %d of %v", step, now, limit, n, dropped, want, model)
				}
				model = model[want:]
			case op < 98:
				v := view{q: q.View(), want: slices.Clone(model)}
				views = append(views, v)
				wg.Go(func() {
					if got := contents(&v.q); !slices.Equal(got, v.want) {
						t.Errorf("a view read concurrently holds %d entries, want %d", len(got), len(v.want))
					}
				})
			default:
				q = Queue[entry]{}
				model = nil
			}
			check(t, step, &q, model)
		}
		wg.Wait()
		for i, v := range views {
			check(t, i, &v.q, v.want)
		}
		// A view is a queue of its own: pushing to it leaves q as it was.
		if len(views) > 0 {
			v := &views[len(views)-1]
			v.q.Push(entry{at: 1, id: "view"})
			check(t, -1, &q, model)
		}
	}
}

// TestPopDueStopsAtTheFirstEntryNotDue: the queue is FIFO, so an entry
// due earlier waits behind one queued before it (as replay expects).
func TestPopDueStopsAtTheFirstEntryNotDue(t *testing.T) {
	var q Queue[entry]
	for _, at := range []int64{5, 10, 3, 4} {
		q.Push(entry{at: at})
	}
	var got []int64
	if n := q.PopDue(6, 10, func(e entry) { got = append(got, e.at) }); n != 1 || !slices.Equal(got, []int64{5}) {
		t.Fatalf("PopDue(6) = %d %v, want just the 5", n, got)
	}
	if n := q.PopDue(100, 2, func(e entry) { got = append(got, e.at) }); n != 2 || !slices.Equal(got, []int64{5, 10, 3}) {
		t.Fatalf("PopDue(100, max 2) = %d %v", n, got)
	}
}

// TestMemoryFollowsTheQueue: popped chunks go, and an emptied queue
// keeps at most one chunk.
func TestMemoryFollowsTheQueue(t *testing.T) {
	var q Queue[entry]
	for i := range 10 * chunkLen {
		q.Push(entry{at: int64(i)})
	}
	if len(q.chunks) != 10 {
		t.Fatalf("%d chunks for 10 chunks' worth", len(q.chunks))
	}
	q.PopDue(int64(5*chunkLen), 1<<30, func(entry) {})
	if len(q.chunks) != 5 {
		t.Fatalf("%d chunks after popping half", len(q.chunks))
	}
	q.PopDue(1<<62, 1<<30, func(entry) {})
	if len(q.chunks) > 1 || q.Len() != 0 {
		t.Fatalf("%d chunks, %d entries once empty", len(q.chunks), q.Len())
	}
	var small Queue[entry]
	small.Push(entry{})
	if c := cap(small.chunks[0]); c != firstChunkCap {
		t.Fatalf("a one-entry queue holds %d entries' memory", c)
	}
}
