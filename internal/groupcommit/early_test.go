package groupcommit

import (
	"testing"
	"time"
)

// A bound far above anything these tests should take, so that a wait
// that should have ended early fails the test instead of hanging it; the
// waits they start are of an hour.
const watchdog = time.Minute

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(watchdog):
		t.Fatalf("%s: still waiting after %v of a wait of an hour", what, watchdog)
	}
}

// waitAnHour starts e's wait of an hour for an append of had bytes; the
// channel closes when it ends.
func waitAnHour(e *Early, had int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		e.Wait(time.Hour, had)
		close(done)
	}()
	return done
}

// stillWaiting fails the test if done closes within 20 ms. A bound the
// other way round cannot fail a correct wait, only miss a wrong one on a
// host stalled that long.
func stillWaiting(t *testing.T, done <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(why)
	case <-time.After(20 * time.Millisecond):
	}
}

// The target is the largest of the last recentCommits commits: an old
// large one stops holding appends back once that many smaller ones came
// after it.
func TestEarlyCommitForgetsOldCommits(t *testing.T) {
	e := New()
	e.Committed(10_000)
	for range recentCommits - 1 {
		e.Committed(100)
	}
	held := waitAnHour(e, 100)
	stillWaiting(t, held, "a 100-byte append did not wait with a 10,000-byte commit among the recent ones")
	e.Appended(9_900)
	waitDone(t, held, "the wait once 9,900 more bytes were queued")
	e.Taken(9_900)

	e.Committed(100) // the 10,000-byte commit leaves the window
	waitDone(t, waitAnHour(e, 100), "a 100-byte append once the recent commits were all of 100 bytes")
}

// A wake-up left in the channel by an appender that saw the previous
// wait's target does not end the next wait early.
func TestEarlyCommitIgnoresAStaleWake(t *testing.T) {
	e := New()
	e.Committed(1_000)
	e.wake <- struct{}{}
	done := waitAnHour(e, 100)
	stillWaiting(t, done, "a stale wake-up ended a wait with 100 of 1,000 bytes queued")
	e.Appended(900)
	waitDone(t, done, "the wait once 900 more bytes were queued")
}
