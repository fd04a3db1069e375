// Package groupcommit decides when a log's writer starts its next group
// commit (the embedded log's fsync, a Kafka partition's transaction).
package groupcommit

import (
	"sync/atomic"
	"time"
)

// Early commits. A log's interval (the embedded log's SyncInterval, a
// Kafka partition's MinCycle) makes appends that arrive soon after a
// commit started wait for the next one, so that an open stream of appends
// (requests at a fixed rate) shares one fsync per interval instead of
// paying one each. Callers that each wait for their own append before
// sending the next gain nothing from that wait once they are all back:
// nobody else is coming, and they sit idle for the rest of the interval.
// The writer cannot see callers, but it sees their entries (a caller's
// command is one, whatever its size): once as many entries wait as the
// largest of the last recentCommits commits carried, it commits without
// waiting out the interval. An open stream's entries per interval vary
// around their mean, so the largest of recent commits is reached early in
// about one interval in recentCommits+1, and then only just early; a
// closed loop whose callers are all back has reached it. The interval
// stays the longest an append waits to be gathered. (Counted in bytes,
// as it first was, callers whose commands differ in size rarely reached
// it, and one large command kept the rest from it for 16 commits.)
//
// 16: a window of 8 cut the wait a little more for 16 callers in a loop but
// added 12 % more fsyncs to the ticketing compat run, 32 cut less of the
// wait (docs/BENCHMARKS.md).
const recentCommits = 16

// Early is a log writer's view of what waits for it: Appended is called by
// appenders, the rest by the writer alone.
type Early struct {
	queued atomic.Int64 // entries appended and not yet taken by the writer
	want   atomic.Int64 // while the writer waits: queued entries that end the wait; 0 otherwise
	wake   chan struct{}
	timer  *time.Timer
	onWait atomic.Pointer[func()]
	hurry  atomic.Bool // no more waits: the log's owner is closing

	recent [recentCommits]int64 // entries of the last commits (writer only)
	next   int
}

// New returns an Early with no commit to go by yet.
func New() *Early {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &Early{wake: make(chan struct{}, 1), timer: t}
}

// Appended counts n entries just queued by an appender, and wakes the
// writer if they complete what it waits for.
func (e *Early) Appended(n int) {
	if n == 0 {
		return
	}
	q := e.queued.Add(int64(n))
	switch w := e.want.Load(); {
	case w > 0 && q >= w:
		select {
		case e.wake <- struct{}{}:
		default:
		}
	case w > 0:
		e.waiting() // fewer wanted now: what appenders hold back may be enough
	}
}

// Wanted is how many more entries would end the writer's wait for the
// next commit now; 0 if it is not waiting (or has what it waits for). An
// appender holding entries back until the commit in flight is done (the
// engine's coalescing) appends them at once when they are enough: they
// would start the commit, where held back they would wait out its
// interval and then the one after it.
func (e *Early) Wanted() int {
	w := e.want.Load()
	if w == 0 {
		return 0
	}
	return int(max(w-e.queued.Load(), 0))
}

// Hurry ends the writer's wait, if it waits, and every later one at once:
// its appenders are closing and wait for what is in flight.
func (e *Early) Hurry() {
	e.hurry.Store(true)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// OnWait sets fn, called each time the writer starts to wait for entries
// and each time an append during the wait leaves it short (Wanted is then
// above 0, and smaller): an appender that held entries back checks
// again. fn must not block.
func (e *Early) OnWait(fn func()) { e.onWait.Store(&fn) }

// waiting calls OnWait's function, if one is set.
func (e *Early) waiting() {
	if fn := e.onWait.Load(); fn != nil {
		(*fn)()
	}
}

// Taken counts n queued entries the writer took.
func (e *Early) Taken(n int) { e.queued.Add(-int64(n)) }

// Wait waits d, or less once as many entries are queued (besides had,
// taken already) as the largest recent commit carried.
func (e *Early) Wait(d time.Duration, had int) {
	if e.hurry.Load() {
		return
	}
	largest := int64(0)
	for _, b := range e.recent {
		largest = max(largest, b)
	}
	if largest == 0 {
		time.Sleep(d) // no commit yet to go by
		return
	}
	want := largest - int64(had)
	if want <= 0 {
		return // the first append alone is as large
	}
	e.want.Store(want)
	e.waiting()
	if e.queued.Load() < want {
		e.timer.Reset(d)
	wait:
		// A wake-up can be stale: an appender that read want just before
		// the last wait ended sends it after the drain below.
		for e.queued.Load() < want && !e.hurry.Load() {
			select {
			case <-e.timer.C:
				break wait
			case <-e.wake:
			}
		}
		e.timer.Stop()
	}
	e.want.Store(0)
	select {
	case <-e.wake: // a wake-up sent after the wait ended
	default:
	}
}

// Committed notes the entries of a commit the writer starts.
func (e *Early) Committed(n int) {
	e.recent[e.next] = int64(n)
	e.next = (e.next + 1) % recentCommits
}
