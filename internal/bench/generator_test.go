package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// serve runs h with the listener Surge uses on a loopback port for the
// test's lifetime and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveUntil(ctx, api.NewServer(ln.Addr().String(), h, api.Limits{}, nil), ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func spike(t *testing.T, cfg GenConfig) *Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := g.Spike(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSpikeAgainstNullServer(t *testing.T) {
	base := serve(t, NullHandler())
	for _, flow := range []string{FlowCompat, FlowNative} {
		for _, h2 := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/http2=%v", flow, h2), func(t *testing.T) {
				s := spike(t, GenConfig{
					BaseURL: base, Flow: flow, Areas: 3, Reservations: 250, Clients: 2,
					Groups: 2, Inflight: 17, HTTP2: h2, Seed: 7,
				})
				if s.Reservations != 500 || s.Successes != 500 || s.Failures+s.Errors+s.Invalid+s.Retries != 0 {
					t.Fatalf("want 500 successes and nothing else, got %+v", s)
				}
				if s.P50Us <= 0 || s.P99Us < s.P50Us || s.MaxUs < s.P99Us || s.PerSecond <= 0 {
					t.Fatalf("latency or rate missing: %+v", s)
				}
				if s.SeatsOffered != 2*3*400 {
					t.Fatalf("seats offered %d, want %d", s.SeatsOffered, 2*3*400)
				}
			})
		}
	}
}

func TestSpikeChecksSeats(t *testing.T) {
	for _, flow := range []string{FlowCompat, FlowNative} {
		t.Run(flow, func(t *testing.T) {
			base := serve(t, newFakeTicketing().handler())
			// 2 groups x 2 areas x 400 seats, 1,000 requests of 2.5 seats on
			// average: enough to sell out, so failures must appear too.
			s := spike(t, GenConfig{
				BaseURL: base, Flow: flow, Areas: 2, Reservations: 500, Clients: 2,
				Groups: 2, Inflight: 8, HTTP2: true, Seed: 1, CheckSeats: true,
			})
			if s.Errors != 0 || s.Invalid != 0 || len(s.DoubleBookings) != 0 {
				t.Fatalf("correct server flagged: %+v", s)
			}
			if s.Successes+s.Failures != 1000 || s.Failures == 0 || s.Successes == 0 {
				t.Fatalf("outcomes do not add up to 1000 with both kinds: %+v", s)
			}
			// First fit leaves at most a few seats per row unsold.
			if s.SeatsSold > s.SeatsOffered || s.SeatsSold < s.SeatsOffered*9/10 {
				t.Fatalf("sold %d of %d seats", s.SeatsSold, s.SeatsOffered)
			}
		})
	}
}

func TestSpikeCatchesDoubleBooking(t *testing.T) {
	f := newFakeTicketing()
	f.doubleBook = true
	base := serve(t, f.handler())
	s := spike(t, GenConfig{
		BaseURL: base, Flow: FlowNative, Areas: 1, Reservations: 50, Clients: 1,
		Groups: 1, Inflight: 4, HTTP2: false, Seed: 1, CheckSeats: true,
	})
	if len(s.DoubleBookings) == 0 {
		t.Fatalf("double booking not caught: %+v", s)
	}
	if d := s.DoubleBookings[0]; d.Seat != (Seat{Row: 0, Col: 0}) || d.Times != 50 {
		t.Fatalf("want seat 0,0 booked 50 times first, got %v", d)
	}
}

func TestSpikeCountsErrorsAndRetries(t *testing.T) {
	var calls atomic.Int64
	h := http.NewServeMux()
	h.Handle("/", NullHandler())
	// Every reservation POST fails with 503 twice, then succeeds; a 400 is
	// an error at once.
	h.HandleFunc("POST /v2/reservations", func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.Header.Get("Idempotency-Key") == "":
			w.WriteHeader(http.StatusBadRequest)
		case n%3 != 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			NullHandler().ServeHTTP(w, r)
		}
	})
	base := serve(t, h)
	s := spike(t, GenConfig{
		BaseURL: base, Flow: FlowNative, Areas: 1, Reservations: 10, Clients: 1,
		Groups: 1, Inflight: 1, HTTP2: true, Seed: 1,
	})
	if s.Successes != 10 || s.Retries != 20 || s.Errors != 0 {
		t.Fatalf("want 10 successes after 20 retries, got %+v", s)
	}
}

// BenchmarkSpike measures the generator and the null server together, one
// reservation per op; run it with -benchmem to watch allocations.
func BenchmarkSpike(b *testing.B) {
	base := "http://" + benchNull(b)
	for _, c := range []struct {
		flow string
		h2   bool
	}{{FlowCompat, true}, {FlowNative, true}, {FlowCompat, false}, {FlowNative, false}} {
		b.Run(fmt.Sprintf("%s/http2=%v", c.flow, c.h2), func(b *testing.B) {
			g, err := NewGenerator(GenConfig{
				BaseURL: base, Flow: c.flow, Areas: 10, Reservations: b.N, Clients: 4,
				Groups: 1, Inflight: 64, HTTP2: c.h2, Seed: 1,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			if err := g.Setup(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			s, err := g.Spike(context.Background())
			if err != nil || s.Errors > 0 {
				b.Fatal(err, s)
			}
		})
	}
}

func benchNull(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := api.NewServer(ln.Addr().String(), NullHandler(), api.Limits{}, nil)
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestNodeForClient(t *testing.T) {
	// 2 groups x 4 clients over 3 nodes: the clients of both groups are
	// dealt in turn, so the second group starts where the first stopped.
	var got []int
	for g := range 2 {
		for c := range 4 {
			got = append(got, nodeForClient(g, c, 4, 3))
		}
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0, 1}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("clients → nodes %v, want %v", got, want)
	}
	for _, nodes := range []int{0, 1} {
		if n := nodeForClient(1, 3, 4, nodes); n != 0 {
			t.Fatalf("%d nodes: client went to node %d", nodes, n)
		}
	}
}

// A spike over several nodes: every client's reservations go to its own
// node, and PerNode counts them as the nodes saw them.
func TestSpikeSpreadsClientsOverNodes(t *testing.T) {
	const nodes = 3
	var posts [nodes]atomic.Int64
	var bases []string
	for i := range nodes {
		h := NullHandler()
		bases = append(bases, serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path != "/v1/event" {
				posts[i].Add(1)
			}
			h.ServeHTTP(w, r)
		})))
	}
	for _, flow := range []string{FlowCompat, FlowNative} {
		for i := range posts {
			posts[i].Store(0)
		}
		s := spike(t, GenConfig{
			BaseURL: bases[0], Nodes: bases, Flow: flow, Areas: 2, Reservations: 300,
			Clients: 4, Groups: 1, Inflight: 8, HTTP2: true, Seed: 1,
		})
		if s.Errors != 0 || len(s.PerNode) != nodes {
			t.Fatalf("%s: %d errors, per node %v", flow, s.Errors, s.PerNode)
		}
		var sum int64
		for i := range nodes {
			// 4 clients on 3 nodes: node 0 has two of them, the others one.
			if got := posts[i].Load(); got != s.PerNode[i] || got == 0 {
				t.Fatalf("%s: node %d got %d reservations, report says %d (all: %v)", flow, i, got, s.PerNode[i], s.PerNode)
			}
			sum += s.PerNode[i]
		}
		if sum != s.Reservations || s.PerNode[0] <= s.PerNode[1] {
			t.Fatalf("%s: per node %v, %d reservations", flow, s.PerNode, s.Reservations)
		}
	}
}
