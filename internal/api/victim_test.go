package api

import (
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
