package api

import (
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"
)

// An idle connection whose client sent bytes (an HTTP/2 PING or
// WINDOW_UPDATE: no stream, so the HTTP server never reports it idle
// again) is skipped while the bytes wait, and shed once they are read.
// Before, the shedding dropped it from the idle list for good: at the cap
// every later newcomer was refused while it sat idle.
func TestIdleConnWithUnreadBytesStaysSheddable(t *testing.T) {
	tr := newConnTracker(1, time.Minute, time.Minute)
	s1, c1 := tcpPair(t)
	idle := tr.admit(s1)
	if idle == nil {
		t.Fatal("first connection refused under the cap")
	}
	tr.setState(idle, http.StateIdle)
	if _, err := c1.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !idle.hasUnread() {
		if time.Now().After(deadline) {
			t.Fatal("the client's byte never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	s2, _ := tcpPair(t)
	if tr.admit(s2) != nil {
		t.Fatal("a connection with unread bytes was shed")
	}
	var b [1]byte
	if _, err := idle.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	s3, _ := tcpPair(t)
	if tr.admit(s3) == nil {
		t.Fatal("the idle connection, its bytes read, was not shed for a newcomer: it left the idle list")
	}
	if tr.openConns() != 1 {
		t.Fatalf("open connections %d, want 1", tr.openConns())
	}
}

// TestShedsTheLongestIdleOverAllShards: whatever the connections' states
// went through, the one shed at the cap is the one idle longest over all
// shards, else the oldest new one past its grace (the model: one list
// per kind, as before the lists were sharded).
func TestShedsTheLongestIdleOverAllShards(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 300 {
		tr := newConnTracker(1<<20, DefaultIdleTimeout, DefaultReadHeaderTimeout)
		tr.shards = make([]connShard, 1+rng.IntN(5))
		tr.grace = 0
		var conns []*trackedConn
		for range 1 + rng.IntN(12) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			c := tr.admit(a)
			tr.setState(c, http.StateNew)
			conns = append(conns, c)
		}
		states := []http.ConnState{http.StateActive, http.StateIdle}
		for range rng.IntN(40) {
			tr.setState(conns[rng.IntN(len(conns))], states[rng.IntN(len(states))])
		}
		type listed struct {
			idle bool
			age  time.Time
		}
		model := map[*trackedConn]listed{}
		var want *trackedConn
		for _, c := range conns {
			if c.list == nil {
				continue // active
			}
			l := listed{idle: c.list.kindIdle(tr), age: c.since}
			if l.idle {
				l.age = c.idleSince
			}
			model[c] = l
			if w, ok := model[want]; !ok || l.idle && !w.idle || l.idle == w.idle && l.age.Before(w.age) {
				want = c
			}
		}
		tr.mu.Lock()
		got := tr.takeVictimLocked(time.Now())
		tr.mu.Unlock()
		if got != want && (got == nil || want == nil || model[got] != model[want]) { // a tie may go either way
			t.Fatalf("round %d: shed %v, want %v (the longest idle, else the oldest new)", round, model[got], model[want])
		}
		if got != nil && (!got.closed || got.list != nil) {
			t.Fatalf("round %d: the shed connection is still open or listed", round)
		}
	}
}

// kindIdle says whether l is one of the tracker's idle lists.
func (l *connList) kindIdle(t *connTracker) bool {
	for i := range t.shards {
		if l == &t.shards[i].idle {
			return true
		}
	}
	return false
}
