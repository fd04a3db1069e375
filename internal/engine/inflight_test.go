package engine_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wal"
)

// heldLog keeps every append (in order) from the real log until let go:
// a disk whose flush takes as long as the test wants.
type heldLog struct {
	*wal.Log
	mu       sync.Mutex
	held     bool
	queued   []func()
	appended atomic.Int64     // entries handed to Append
	sizes    map[uint32][]int // entries of each Append, by the partition of its first entry
}

func (l *heldLog) Append(es []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.appended.Add(int64(len(es)))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sizes == nil {
		l.sizes = map[uint32][]int{}
	}
	l.sizes[es[0].Partition] = append(l.sizes[es[0].Partition], len(es))
	if l.held {
		l.queued = append(l.queued, func() { l.Log.Append(es, done) })
		return
	}
	l.Log.Append(es, done)
}

func (l *heldLog) letGo() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = false
	for _, f := range l.queued {
		f()
	}
	l.queued = nil
}

// Commands that reach a partition while its batch waits for the log are
// not each built into a batch of their own, one per wake-up of the
// processor (the unary jobs bench made 44,000 batches of 2.3 commands per
// 100,000 submits, each with its own append, hand-offs and release): they
// wait in the inbox for that batch's done, which has the processor take
// them all into one batch for the log's next commit. None is stranded.
func TestCommandsWaitingForTheLogShareABatch(t *testing.T) {
	const requests = 10
	dir := t.TempDir()
	hl := &heldLog{held: true}
	e := openEngineWith(t, dir, func(o *engine.Options) {
		hl.Log = openWAL(t, dir, o.Partitions)
		o.Log = hl
	})
	defer e.Close()
	errs := make(chan error, requests)
	do := func() {
		_, err := e.Do(context.Background(), 0, 7, &transfer{From: "a", To: "a", N: 1})
		errs <- err
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				hl.letGo()
				t.Fatalf("%s: not within 10 s (%d entries appended)", what, hl.appended.Load())
			}
		}
	}
	go do()
	waitFor("the first command handed to the log", func() bool { return hl.appended.Load() == 1 })
	waitFor("the processor parked", func() bool { return engine.Parked(e, 0) })
	for range requests - 1 {
		go do()
	}
	waitFor("the other commands queued", func() bool { return engine.InboxLen(e, 0) == requests-1 })
	if n := hl.appended.Load(); n != 1 {
		t.Errorf("%d entries handed to the log while the first batch waited for it; want 1 (the rest wait for its done)", n)
	}
	hl.letGo()
	for range requests {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	hl.mu.Lock()
	defer hl.mu.Unlock()
	// The second batch also carries the first transfer's credit (mail
	// to the account's partition), and later ones the others'.
	if sz := hl.sizes[0]; len(sz) < 2 || sz[0] != 1 || sz[1] < requests-1 {
		t.Errorf("partition 0's appends carried %v entries; want 1, then the %d commands queued behind it in one batch", sz, requests-1)
	}
}

// slowDoneLog reports each append's durability after a random pause of
// up to 200 µs, on the log's completion goroutine (so in order): dones
// land at every point of the submitters' coalescing check.
type slowDoneLog struct {
	*wal.Log
	mu  sync.Mutex
	rng *rand.Rand
}

func (l *slowDoneLog) Append(es []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.mu.Lock()
	pause := time.Duration(l.rng.IntN(200)) * time.Microsecond
	l.mu.Unlock()
	l.Log.Append(es, func(first, end cmdlog.Position, err error) {
		time.Sleep(pause)
		done(first, end, err)
	})
}

// TestNoCommandIsStrandedBehindABatch: commands that wait for their
// partition's batch in flight (coalescing) are always taken by a later
// batch, whenever that batch's done comes. Rounds of concurrent commands
// to one partition each end only when every command of the round is
// answered: a command left in the inbox with no kick coming, the last
// of its round, would hold its round until the deadline.
func TestNoCommandIsStrandedBehindABatch(t *testing.T) {
	const rounds, submitters = 300, 8
	dir := t.TempDir()
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.Log = &slowDoneLog{Log: openWAL(t, dir, o.Partitions), rng: rand.New(rand.NewPCG(1, 2))}
	})
	defer e.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range rounds {
		// Far more than a round takes on a busy machine (milliseconds).
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		n := 1 + rng.IntN(submitters)
		errs := make(chan error, n)
		for range n {
			go func() {
				// No mail, no timer: nothing but a kick wakes the
				// processor for it.
				_, err := e.Do(ctx, 0, 7, &cancelAlarm{ID: "none"})
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d of %d commands: %v (a command stranded in the inbox?)", round, n, err)
			}
		}
		cancel()
	}
}
