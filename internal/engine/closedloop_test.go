package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/wal"
)

// Callers that each wait for their own write before sending the next (a
// closed loop: a seed script, a few workers) do not wait out the log's
// interval once they are all back, in the log's next commit or held
// behind their partition's batch in flight: the commit starts. With an
// interval of an hour, every caller gets through its first 100 writes
// only if each commit started so. (A caller that leaves the loop is one
// the log may wait for: Close hurries what is left.)
func TestClosedLoopsDoNotWaitOutTheInterval(t *testing.T) {
	for _, c := range []struct{ parts, callers int }{{1, 1}, {1, 2}, {1, 4}, {1, 9}, {4, 8}, {8, 5}} {
		t.Run(fmt.Sprintf("%d callers on %d partitions", c.callers, c.parts), func(t *testing.T) {
			dir := t.TempDir()
			lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: c.parts, SyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			e := enginetest.OpenEngine(t, dir, engine.Options{Partitions: c.parts, Log: lg, Logger: quiet}, bank{})
			at := time.Now().Add(time.Hour).UnixNano()
			var (
				stop    atomic.Bool
				callers sync.WaitGroup
				through sync.WaitGroup // callers with 100 writes done
			)
			through.Add(c.callers)
			for i := range c.callers {
				callers.Go(func() {
					for n := 1; !stop.Load(); n++ {
						// One record, no message: an alarm that never rings.
						_, err := e.Do(context.Background(), i%c.parts, 7, &alarm{ID: fmt.Sprint("caller ", i), AtNs: at})
						if err != nil {
							if !stop.Load() {
								t.Errorf("caller %d, write %d: %v", i, n, err)
							}
							return
						}
						if n == 100 {
							through.Done()
						}
					}
				})
			}
			waitFor(t, through.Wait, "every caller's 100 writes (a commit waits out the log's interval of an hour)")
			stop.Store(true)
			if err := e.Close(); err != nil {
				t.Error(err)
			}
			waitFor(t, callers.Wait, "the callers' last writes once the engine closed")
		})
	}
}

// waitFor runs wait, failing the test if it has not returned within a
// minute (and leaving it running).
func waitFor(t *testing.T, wait func(), what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("still waiting after a minute for %s", what)
	}
}
