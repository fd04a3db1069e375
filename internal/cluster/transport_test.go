package cluster

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
)

func TestClientIDRoundTrip(t *testing.T) {
	for _, c := range []struct{ node, addr string }{{"a", "127.0.0.1:8080"}, {"host-1.example", "[::1]:9"}} {
		node, addr, ok := parseClientID(clientID(c.node, c.addr))
		if !ok || node != c.node || addr != c.addr {
			t.Errorf("%q %q came back as %q %q %v", c.node, c.addr, node, addr, ok)
		}
	}
	for _, id := range []string{"", "kgo", "surge/", "surge/a", "surge//x", "surge/a/", "other/a/b:1"} {
		if _, _, ok := parseClientID(id); ok {
			t.Errorf("%q parsed as a surge node", id)
		}
	}
}

func testNode() *Node {
	n := &Node{
		cfg:     Config{Log: kafkalog.Config{Cluster: "blue", NodeID: "self"}, Advertise: "127.0.0.1:1"},
		log:     slog.New(slog.DiscardHandler),
		owners:  newOwnerMap(4),
		refresh: make(chan struct{}, 1),
	}
	n.transport = newTransport(n)
	return n
}

// The call endpoint refuses what must not reach the engine before reading
// it: another cluster's calls, oversized bodies, other methods.
func TestCallHandlerRefuses(t *testing.T) {
	h := testNode().Handler(nil)
	for _, c := range []struct {
		name    string
		method  string
		cluster string
		length  int64
		want    int
	}{
		{"other cluster", "POST", "green", 10, http.StatusConflict},
		{"no cluster", "POST", "", 10, http.StatusConflict},
		{"too big", "POST", "blue", MaxCallBytes + 1, http.StatusRequestEntityTooLarge},
		{"GET", "GET", "blue", 0, http.StatusMethodNotAllowed},
	} {
		r := httptest.NewRequest(c.method, CallPath, strings.NewReader("x"))
		r.ContentLength = c.length
		if c.cluster != "" {
			r.Header.Set(HeaderCluster, c.cluster)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d (%s)", c.name, w.Code, c.want, w.Body)
		}
	}
}

// A call that certainly did not reach an engine wraps ErrNotOwner (the
// engine retries it) and asks for the owner map again.
func TestCallNotDelivered(t *testing.T) {
	n := testNode()
	if _, err := n.transport.Call(context.Background(), 0, []byte("x")); !errors.Is(err, engine.ErrNotOwner) {
		t.Errorf("no owner known: %v", err)
	}
	<-n.refresh
	n.owners.setLocal(1, "self", "127.0.0.1:1")
	if _, err := n.transport.Call(context.Background(), 1, []byte("x")); !errors.Is(err, engine.ErrNotOwner) {
		t.Errorf("owner is this node: %v", err)
	}
	<-n.refresh

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	n.owners.setLocal(2, "gone", closed)
	if _, err := n.transport.Call(context.Background(), 2, []byte("x")); !errors.Is(err, engine.ErrNotOwner) {
		t.Errorf("connection refused: %v", err)
	}
	<-n.refresh

	// A node of another cluster at the address: refused before applying.
	other := &Node{cfg: Config{Log: kafkalog.Config{Cluster: "green"}}}
	srv := httptest.NewServer(other.Handler(nil))
	defer srv.Close()
	n.owners.setLocal(3, "stranger", strings.TrimPrefix(srv.URL, "http://"))
	if _, err := n.transport.Call(context.Background(), 3, []byte("x")); !errors.Is(err, engine.ErrNotOwner) {
		t.Errorf("another cluster's node: %v", err)
	}
}

// An answer that came from a node after it may have applied the command
// is not "not delivered": the engine must not send it again.
func TestCallFailureAfterDeliveryIsNotNotOwner(t *testing.T) {
	n := testNode()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close() // read the request, then died
	}))
	defer srv.Close()
	n.owners.setLocal(0, "dies", strings.TrimPrefix(srv.URL, "http://"))
	_, err := n.transport.Call(context.Background(), 0, []byte("x"))
	if err == nil || errors.Is(err, engine.ErrNotOwner) {
		t.Errorf("connection closed after the request was read: %v", err)
	}
}

// A paused node (SIGSTOP, a frozen VM) still accepts connections, in its
// kernel, and never answers. A call to it is abandoned as soon as a read
// of the group no longer lists the node (the group expelled it, and its
// partitions go to others), not when the call's own time runs out: the
// caller's other requests for the partition wait behind it. The error is
// not "not delivered" (the node may yet read the request), and a read that
// still lists the node (a rebalance) leaves the call alone.
func TestCallToAPausedNodeEndsWhenItLeavesTheGroup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never read: a paused process
		}
	}()
	n := testNode()
	paused := Member{NodeID: "paused", Addr: ln.Addr().String()}
	self := Member{NodeID: "self", Addr: "127.0.0.1:1"}
	n.owners.setRead([]Member{paused, self, self, self}, []Member{paused, self})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	callErr := make(chan error, 1)
	go func() {
		_, err := n.transport.Call(ctx, 0, []byte("x"))
		callErr <- err
	}()
	broadcast := make(chan struct{})
	go func() {
		n.transport.Broadcast(ctx, []byte("x"))
		close(broadcast)
	}()
	for range 2 {
		c := <-accepted
		defer c.Close()
	}

	// A rebalance: the node is still a member, its assignment unknown.
	n.owners.setRead(make([]Member, 4), []Member{paused, self})
	select {
	case err := <-callErr:
		t.Fatalf("call ended while its node was still in the group: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	n.owners.setRead([]Member{self, self, self, self}, []Member{self})
	select {
	case err := <-callErr:
		if !errors.Is(err, errLeftGroup) || errors.Is(err, engine.ErrNotOwner) {
			t.Errorf("call abandoned: %v, want errLeftGroup and not ErrNotOwner", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("call to a paused node still waiting after the node left the group")
	}
	select {
	case <-broadcast:
	case <-time.After(10 * time.Second):
		t.Fatal("broadcast to a paused node still waiting after the node left the group")
	}
}

// Each read of the group says who joined and who left since the last one
// (nothing on the first: the node has just started).
func TestSetReadReportsMembership(t *testing.T) {
	m := newOwnerMap(1)
	a, b, c := Member{NodeID: "a"}, Member{NodeID: "b"}, Member{NodeID: "c"}
	if joined, left := m.setRead(make([]Member, 1), []Member{a, b}); joined != nil || left != nil {
		t.Errorf("first read: joined %v left %v", joined, left)
	}
	joined, left := m.setRead(make([]Member, 1), []Member{b, c})
	if !slices.Equal(joined, []string{"c"}) || !slices.Equal(left, []string{"a"}) {
		t.Errorf("a left, c joined: got joined %v left %v", joined, left)
	}
}

// A rebalance that gives this node nothing still changed the group (a
// node was expelled, its partitions went to others): the owner map is
// read again at once, not at the next tick.
func TestEveryRebalanceRereadsTheGroup(t *testing.T) {
	n := testNode()
	n.assigned(nil)
	select {
	case <-n.refresh:
	default:
		t.Error("a rebalance that assigned nothing here did not ask for the group to be read")
	}
}

func TestLagOf(t *testing.T) {
	for _, c := range []struct{ end, pos, marker, want int64 }{
		{end: 12, pos: 4, marker: 10, want: 0},  // opened (marker 10, commit 11), nothing appended
		{end: 15, pos: 14, marker: 10, want: 0}, // appended 12, 13; commit at 14
		{end: 17, pos: 14, marker: 10, want: 2}, // a transaction of 2 records is being written
		{end: 0, pos: 0, marker: -1, want: 0},
	} {
		if got := lagOf(c.end, c.pos, c.marker); got != c.want {
			t.Errorf("lagOf(%d, %d, %d) = %d, want %d", c.end, c.pos, c.marker, got, c.want)
		}
	}
}

// A group member's client id, whatever it is (any Kafka client may join
// the group), is refused or names a node and an address that make that
// same id again.
func FuzzParseClientID(f *testing.F) {
	f.Add(clientID("n1", "127.0.0.1:8081"))
	f.Add("surge//x")
	f.Add("kgo")
	f.Fuzz(func(t *testing.T, id string) {
		node, addr, ok := parseClientID(id)
		if ok && (node == "" || addr == "" || clientID(node, addr) != id) {
			t.Fatalf("%q parsed as node %q addr %q", id, node, addr)
		}
	})
}
