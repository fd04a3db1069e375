package engine_test

import (
	"context"
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
	appended atomic.Int64 // entries handed to Append
}

func (l *heldLog) Append(es []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.appended.Add(int64(len(es)))
	l.mu.Lock()
	defer l.mu.Unlock()
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

// Requests that reach a partition one by one while its earlier batches
// wait for the log are applied and handed to the log at once, each in a
// small batch of its own, so that the next group commit takes them all.
// With at most 4 batches in flight, the fifth waited for one of them to
// be durable, and missed the commit that made it so.
func TestSmallBatchesDoNotWaitForTheLog(t *testing.T) {
	const requests = 10
	dir := t.TempDir()
	hl := &heldLog{held: true}
	e := openEngineWith(t, dir, func(o *engine.Options) {
		hl.Log = openWAL(t, dir, o.Partitions)
		o.Log = hl
	})
	defer e.Close()
	errs := make(chan error, requests)
	for i := range requests {
		go func() {
			_, err := e.Do(context.Background(), 0, 7, &transfer{From: "a", To: "a", N: 1})
			errs <- err
		}()
		deadline := time.Now().Add(10 * time.Second)
		for hl.appended.Load() < int64(i+1) {
			if time.Now().After(deadline) {
				hl.letGo()
				t.Fatalf("request %d was not handed to the log while %d entries waited for it", i+1, hl.appended.Load())
			}
			time.Sleep(time.Millisecond)
		}
	}
	hl.letGo()
	for range requests {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
