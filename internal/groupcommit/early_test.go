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

// While the writer waits, Wanted says how many entries would end the wait,
// and OnWait's function runs when the wait starts and after each append
// that leaves it short, so that an appender holding entries back can
// check again; Hurry ends the wait and every later one.
func TestEarlyCommitSaysWhatItWants(t *testing.T) {
	e := New()
	if n := e.Wanted(); n != 0 {
		t.Fatalf("Wanted %d before any wait", n)
	}
	calls := make(chan int, 10)
	e.OnWait(func() { calls <- e.Wanted() })
	e.Committed(5)
	done := waitAnHour(e, 1)
	if n := <-calls; n != 4 {
		t.Fatalf("OnWait at the wait's start saw Wanted %d, want 4", n)
	}
	e.Appended(2)
	if n := <-calls; n != 2 {
		t.Fatalf("OnWait after an append of 2 saw Wanted %d, want 2", n)
	}
	stillWaiting(t, done, "the wait ended with 2 of 4 entries")
	e.Appended(2)
	waitDone(t, done, "the wait once 4 entries were appended")
	e.Taken(4)
	if n := e.Wanted(); n != 0 {
		t.Fatalf("Wanted %d after the wait", n)
	}
	select {
	case n := <-calls:
		t.Fatalf("OnWait ran with Wanted %d for the append that ended the wait", n)
	default:
	}

	held := waitAnHour(e, 1)
	<-calls
	e.Hurry()
	waitDone(t, held, "a wait once hurried")
	waitDone(t, waitAnHour(e, 1), "a wait after Hurry")
}
