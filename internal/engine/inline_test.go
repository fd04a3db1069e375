package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
)

// TestIdlePartitionServedBySubmitter: requests that find their partition
// idle are served on the submitter's goroutine, so the processor is not
// woken for each (a goroutine wake-up, across cores on a big machine).
func TestIdlePartitionServedBySubmitter(t *testing.T) {
	e := openEngineWith(t, t.TempDir(), nil)
	defer e.Close()
	const n = 200
	p := e.PartitionOf("idle")
	mustDo(t, e, p, &alarm{ID: "far", AtNs: time.Now().Add(time.Hour).UnixNano()})
	before := engine.ProcessorServed(e, p)
	for range n {
		if _, err := e.Query(context.Background(), p, 7, getAccount{Key: "idle"}); err != nil {
			t.Fatal(err)
		}
	}
	// A few may still go to the processor (it may be busy with the
	// alarm's batch when the first query comes); not one each.
	if got := engine.ProcessorServed(e, p) - before; got > n/10 {
		t.Fatalf("the processor built %d of %d sequential queries' batches; an idle partition should be served by the submitter", got, n)
	}
}

// TestInlineBatchArmsProcessorClock: a timer set by a batch a submitter
// served fires on time, although the processor was parked with no timer
// armed when it was set. Nothing else touches the partition meanwhile (a
// later batch would fire a due timer itself).
func TestInlineBatchArmsProcessorClock(t *testing.T) {
	rang := make(chan any, 1)
	e := openEngineWith(t, t.TempDir(), func(o *engine.Options) {
		o.Notify = func(_ int, _ uint8, v any) { rang <- v }
	})
	defer e.Close()
	p := e.PartitionOf("wake")
	// Let the processor start and park with no timer armed.
	time.Sleep(100 * time.Millisecond)
	mustDo(t, e, p, &alarm{ID: "wake", AtNs: time.Now().Add(50 * time.Millisecond).UnixNano()})
	select {
	case v := <-rang:
		if v != "rang wake" {
			t.Fatalf("note %v, want rang wake", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the timer set by an inline batch did not fire within 30 s")
	}
}

// TestSubmitRacingClose: every request submitted while Close runs is
// either served or refused with ErrClosed; none hangs.
func TestSubmitRacingClose(t *testing.T) {
	e := openEngineWith(t, t.TempDir(), nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 16 {
		wg.Go(func() {
			key := keys[i%len(keys)]
			for {
				_, err := e.Query(context.Background(), e.PartitionOf(key), 7, getAccount{Key: key})
				if errors.Is(err, engine.ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("submitters still waiting 30 s after Close")
	}
}
