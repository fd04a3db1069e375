package sequencer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/seqpb"
)

// fillHub takes every place of the hub, as long polls of another group
// would.
func fillHub(t *testing.T, h *Hub) {
	key := outputKey("someone-else")
	for h.Waiting() < h.waiters.Max() {
		w := h.waiters.AddPoll(key)
		t.Cleanup(func() { h.waiters.Remove(key, w) })
	}
}

// TestWaitersPastTheCapHTTP: with every --max-waiters place taken, a
// lease or output long poll is still answered 200 within its wait, with
// what arrived meanwhile (found by its rechecks), not refused; a stream
// is refused 503 with a Retry-After that gives each refused client its own
// turn (1 s, then 2 s while no place has been freed), not a fixed 1 s.
func TestWaitersPastTheCapHTTP(t *testing.T) {
	srv, a := newAPIServer(t)
	fillHub(t, a.hub)
	g := "/v1/groups/cap"
	longPoll := func(what, method, path, body string, then func()) {
		t.Helper()
		answer := make(chan string, 1)
		go func() {
			st, b := call(t, srv, method, path, body)
			answer <- fmt.Sprint(st, " ", b)
		}()
		time.Sleep(100 * time.Millisecond) // it waits
		then()
		if got := <-answer; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, `"seq":1`) {
			t.Fatalf("%s past the cap: %s; want 200 with seq 1", what, got)
		}
	}
	longPoll("lease long poll", "POST", g+"/lease", `{"processor":"p","waitMs":30000}`, func() {
		must(t, srv, 201, "POST", g+"/messages", `{"payload":"hello"}`)
	})
	longPoll("output long poll", "GET", g+"/output?after=0&wait=30s", "", func() {
		must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":[1]}`)
	})
	var afters []string
	start := time.Now()
	for range 2 {
		resp, err := http.Get(srv.URL + g + "/output/stream")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("stream past the cap: %d; want 503", resp.StatusCode)
		}
		afters = append(afters, resp.Header.Get("Retry-After"))
	}
	if afters[0] != "1" || (afters[1] != "2" && time.Since(start) < time.Second) {
		t.Fatalf("Retry-After of two streams refused at the cap: %q; want 1 then 2 (each its own turn)", afters)
	}
}

// TestWaitersPastTheCapGRPC: the same over gRPC: a Lease with wait_ms
// past the cap is answered, a Read is RESOURCE_EXHAUSTED carrying its turn
// as RetryInfo, grpc-retry-pushback-ms and Retry-After.
func TestWaitersPastTheCapGRPC(t *testing.T) {
	c, a := newGRPC(t)
	fillHub(t, a.hub)
	gPublish(t, c, "cap", &seqpb.PublishMessage{Payload: []byte(`"x"`)})
	if seqs := gLease(t, c, "cap", 1, 30000); fmt.Sprint(seqs) != "[1]" {
		t.Fatalf("Lease with wait_ms past the cap: %v; want [1]", seqs)
	}
	start := time.Now()
	for i, want := range []time.Duration{time.Second, 2 * time.Second} {
		s, err := c.Read(gctx(t), connect.NewRequest(&seqpb.ReadRequest{Group: "cap"}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
			s.Close()
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Fatalf("Read %d past the cap: %v; want RESOURCE_EXHAUSTED", i, err)
		}
		got, ok := api.GRPCRetryDelay(err)
		var ce *connect.Error
		if !ok || !errors.As(err, &ce) || ce.Meta().Get(api.PushbackHeader) != fmt.Sprint(got.Milliseconds()) {
			t.Fatalf("Read %d past the cap: %v, RetryInfo %v (%v); want RetryInfo and a matching pushback", i, err, got, ok)
		}
		// Its turn, counted from the first refusal: less the time since.
		if el := time.Since(start); got > want || got < want-el-time.Millisecond {
			t.Fatalf("Read %d past the cap: RetryInfo %v; want %v less the %v since the first (each refusal its own turn)", i, got, want, el)
		}
	}
}
