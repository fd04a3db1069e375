package sequencer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// shortTimeout stands in for the server's 30 s read and write timeouts:
// every stream and long poll below must outlive it. The ordinary requests
// that set the tests up must not: a request slower than the write timeout
// is cut, as it should be, so it is long enough for one made through a
// forwarding node under -race on a busy machine (at 1 s one was cut).
const shortTimeout = 3 * time.Second

// newLimitedServer runs the HTTP routes and the gRPC service behind
// api.Server, as `surge serve` does, with lim.
func newLimitedServer(t *testing.T, lim api.Limits) (string, *api.Server, *API) {
	t.Helper()
	hub := NewHub(0)
	eng := openAPIEngine(t, func(_ int, wl uint8, v any) {
		if wl == WorkloadID {
			hub.Notify(v)
		}
	})
	a := NewAPI(eng, hub)
	mux := http.NewServeMux()
	a.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	mux.Handle(a.GRPCHandler())
	s := api.NewServer("127.0.0.1:0", mux, lim, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { a.Shutdown(); s.Close(); eng.Close() })
	return "http://" + ln.Addr().String(), s, a
}

func clientFor(h2c bool) *http.Client {
	var p http.Protocols
	if h2c {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func doJSON(t *testing.T, hc *http.Client, method, url, body string) (int, map[string]any, error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%v in %q", err, b)
	}
	return resp.StatusCode, v, nil
}

func mustDo(t *testing.T, hc *http.Client, want int, method, url, body string) map[string]any {
	t.Helper()
	st, v, err := doJSON(t, hc, method, url, body)
	if err != nil || st != want {
		t.Fatalf("%s %s %s: %d %v %v, want %d", method, url, body, st, v, err, want)
	}
	return v
}

// releaseOne publishes a message to group and has processor "px" process
// it, so it is in the group's output.
func releaseOne(t *testing.T, hc *http.Client, base, group string) {
	t.Helper()
	g := base + "/v1/groups/" + group
	mustDo(t, hc, 201, "POST", g+"/messages", `{"payload":"late"}`)
	l := mustDo(t, hc, 200, "POST", g+"/lease", `{"processor":"px","max":10}`)
	mustDo(t, hc, 200, "POST", g+"/complete", `{"processor":"px","seqs":`+seqList(seqsOf(t, l))+`}`)
}

// Issue 17, point 5: the server's write timeout cut the SSE stream (curl
// exit 18 on HTTP/1.1, RST INTERNAL_ERROR on h2c), answered ?wait= empty,
// and lost a lease long poll's answer while keeping the lease. Every one
// of them must live as long as the API allows, over both protocols.
func TestStreamsOutliveTheWriteTimeout(t *testing.T) {
	base, _, _ := newLimitedServer(t, api.Limits{ReadTimeout: shortTimeout, WriteTimeout: shortTimeout})
	for _, h2c := range []bool{false, true} {
		name := map[bool]string{false: "http1", true: "h2c"}[h2c]
		t.Run(name, func(t *testing.T) {
			hc := clientFor(h2c)
			var wg sync.WaitGroup
			errs := make(chan error, 3)
			// An SSE stream gets a message released after the timeout.
			sseGroup := "sse-" + name
			resp, err := hc.Get(base + "/v1/groups/" + sseGroup + "/output/stream")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			wg.Go(func() {
				ev, err := nextEvent(bufio.NewReader(resp.Body))
				if err == nil && (ev.name != "message" || ev.id != "1") {
					err = fmt.Errorf("first event %+v, want message 1", ev)
				}
				if err != nil {
					errs <- fmt.Errorf("SSE stream: %w", err)
				}
			})
			// A long poll of the output with ?wait= past the timeout.
			pollGroup := "poll-" + name
			wg.Go(func() {
				st, v, err := doJSON(t, hc, "GET", base+"/v1/groups/"+pollGroup+"/output?wait=10s", "")
				if err == nil && (st != 200 || len(v["messages"].([]any)) != 1) {
					err = fmt.Errorf("%d %v, want the message released after the timeout", st, v)
				}
				if err != nil {
					errs <- fmt.Errorf("output ?wait=10s: %w", err)
				}
			})
			// A lease long poll woken after the timeout.
			leaseGroup := "lw-" + name
			mustDo(t, hc, 201, "POST", base+"/v1/groups/"+leaseGroup+"/messages", `{"payload":0}`)
			mustDo(t, hc, 200, "POST", base+"/v1/groups/"+leaseGroup+"/lease", `{"processor":"p0"}`)
			wg.Go(func() {
				st, v, err := doJSON(t, hc, "POST", base+"/v1/groups/"+leaseGroup+"/lease", `{"processor":"p1","waitMs":10000,"leaseMs":600000}`)
				if err == nil && (st != 200 || len(v["messages"].([]any)) != 1) {
					err = fmt.Errorf("%d %v, want the message published after the timeout", st, v)
				}
				if err != nil {
					errs <- fmt.Errorf("lease waitMs=10000: %w", err)
				}
			})
			time.Sleep(2 * shortTimeout)
			releaseOne(t, hc, base, sseGroup)
			// The poll's group exists only now: a 404 before it would end
			// the poll, so it is created after the poll began waiting.
			releaseOne(t, hc, base, pollGroup)
			mustDo(t, hc, 201, "POST", base+"/v1/groups/"+leaseGroup+"/messages", `{"payload":1}`)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

type sseEvent struct{ name, id, data string }

// nextEvent reads the next SSE event, skipping comments (pings).
func nextEvent(r *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.name != "" {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "id: "):
			ev.id = line[len("id: "):]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[len("data: "):]
		}
	}
}

// The gRPC Read and Lease calls outlive the write timeout too.
func TestGRPCStreamsOutliveTheWriteTimeout(t *testing.T) {
	base, _, _ := newLimitedServer(t, api.Limits{ReadTimeout: shortTimeout, WriteTimeout: shortTimeout})
	hc := clientFor(true)
	c := seqpbconnect.NewSequencerServiceClient(hc, base, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read, err := c.Read(ctx, connect.NewRequest(&seqpb.ReadRequest{Group: "gread"}))
	if err != nil {
		t.Fatal(err)
	}
	defer read.Close()
	leased := make(chan error, 1)
	mustDo(t, hc, 201, "POST", base+"/v1/groups/glease/messages", `{"payload":0}`)
	mustDo(t, hc, 200, "POST", base+"/v1/groups/glease/lease", `{"processor":"p0"}`)
	go func() {
		res, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "glease", Processor: "p1", WaitMs: 10000}))
		if err == nil && len(res.Msg.Messages) != 1 {
			err = fmt.Errorf("leased %v, want the message published after the timeout", res.Msg.Messages)
		}
		leased <- err
	}()
	time.Sleep(2 * shortTimeout)
	releaseOne(t, hc, base, "gread")
	mustDo(t, hc, 201, "POST", base+"/v1/groups/glease/messages", `{"payload":1}`)
	if !read.Receive() {
		t.Fatalf("Read ended: %v", read.Err())
	}
	if got := read.Msg().Message.Seq; got != 1 {
		t.Fatalf("Read got seq %d, want 1", got)
	}
	if err := <-leased; err != nil {
		t.Fatalf("Lease wait_ms=10000: %v", err)
	}
}

// brokenWriter is a client whose answer cannot be written.
type brokenWriter struct{ h http.Header }

var errBroken = errors.New("the client is gone")

func (b *brokenWriter) Header() http.Header         { return b.h }
func (b *brokenWriter) WriteHeader(int)             {}
func (b *brokenWriter) Write(p []byte) (int, error) { return 0, errBroken }
func (b *brokenWriter) FlushError() error           { return errBroken }

// Issue 17, point 5: a lease long poll whose answer did not go out kept
// its lease (`leased: 1`, the ordered output held for the lease's 10
// minutes). The lease must be given back at once, for HTTP and gRPC.
func TestLeaseNotDeliveredIsGivenBack(t *testing.T) {
	srv, a := newAPIServer(t)
	mux := http.NewServeMux()
	a.Register(mux, nil)
	mux.Handle(a.GRPCHandler())
	for _, tc := range []struct{ name, path, ctype, body string }{
		{"http", "/v1/groups/%s/lease", "application/json", `{"processor":"p1","waitMs":10000,"leaseMs":600000}`},
		{"grpc", LeasePath, "application/json", `{"group":"%s","processor":"p1","waitMs":10000,"leaseMs":600000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := "lw-" + tc.name
			path, body := tc.path, tc.body
			if strings.Contains(path, "%s") {
				path = fmt.Sprintf(path, g)
			} else {
				body = fmt.Sprintf(body, g)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				req := httptest.NewRequest("POST", path, strings.NewReader(body))
				req.Header.Set("Content-Type", tc.ctype)
				mux.ServeHTTP(&brokenWriter{h: http.Header{}}, req)
			}()
			// The poll waits on a group nobody published to; the publish
			// wakes it and it takes the message.
			time.Sleep(200 * time.Millisecond)
			must(t, srv, 201, "POST", "/v1/groups/"+g+"/messages", `{"payload":1}`)
			<-done
			info := must(t, srv, 200, "GET", "/v1/groups/"+g, "")
			if info["leased"] != 0.0 || info["pending"] != 1.0 {
				t.Fatalf("after an undelivered lease answer the group shows leased %v, pending %v; want 0 and 1", info["leased"], info["pending"])
			}
			// And another processor can have it at once.
			if v := must(t, srv, 200, "POST", "/v1/groups/"+g+"/lease", `{"processor":"p2"}`); len(v["messages"].([]any)) != 1 {
				t.Fatalf("the given-back message is not leasable: %v", v)
			}
		})
	}
}

// Issue 17, point 4: GET /output?limit=1000 built one answer of up to
// 1,000 messages of up to 1 MiB. An answer carries at most
// api.StreamPageBytes of messages and says where to continue.
func TestOutputPageIsBoundedInBytes(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/big"
	payload := `"` + strings.Repeat("x", 300<<10) + `"`
	publishReleased(t, srv, g, payload, 8)
	var seqs []uint64
	after := 0.0
	for pages := 0; len(seqs) < 8; pages++ {
		if pages > 8 {
			t.Fatalf("8 messages took more than 8 pages: %v", seqs)
		}
		out := must(t, srv, 200, "GET", fmt.Sprintf("%s/output?limit=1000&after=%d", g, int(after)), "")
		got := seqsOf(t, out)
		if len(got) == 0 || len(got)*len(payload) > api.StreamPageBytes+len(payload) {
			t.Fatalf("page after %v: %d messages of %d bytes, want 1 to %d bytes", after, len(got), len(payload), api.StreamPageBytes)
		}
		if len(got) == 8 {
			t.Fatalf("one answer held all 8 messages of %d bytes", len(payload))
		}
		if out["after"] != float64(got[len(got)-1]) {
			t.Fatalf("answer says after=%v, want its last seq %d", out["after"], got[len(got)-1])
		}
		seqs = append(seqs, got...)
		after = out["after"].(float64)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5 6 7 8]" {
		t.Fatalf("pages gave %v", seqs)
	}
}

// publishReleased publishes n messages of payload to g and processes
// them, in batches that fit a request body.
func publishReleased(t *testing.T, srv *httptest.Server, g, payload string, n int) {
	t.Helper()
	per := max(1, (maxBatchBody/2)/len(payload))
	for sent := 0; sent < n; {
		k := min(per, n-sent)
		msgs := make([]string, k)
		for i := range msgs {
			msgs[i] = `{"payload":` + payload + `}`
		}
		must(t, srv, 201, "POST", g+"/messages", `{"messages":[`+strings.Join(msgs, ",")+`]}`)
		sent += k
	}
	for done := 0; done < n; {
		l := must(t, srv, 200, "POST", g+"/lease", `{"processor":"pp","max":1000}`)
		seqs := seqsOf(t, l)
		must(t, srv, 200, "POST", g+"/complete", `{"processor":"pp","seqs":`+seqList(seqs)+`}`)
		done += len(seqs)
	}
}

// stalledReader opens an SSE stream over a connection with a tiny
// receive buffer and never reads it.
func stalledReader(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 17, point 4: 20 SSE readers that never read took the server from
// 910 MiB to 4 GiB (each built one buffer of up to 1,000 messages of up
// to 100 KB). Readers that stop reading are cut once a write has blocked
// for the stall timeout, and what all streams hold rendered and unsent
// never passes --stream-buffer. A reader ended because the budget stayed
// full is told so, with the id to resume from.
func TestStalledReadersAreCutWithinTheBudget(t *testing.T) {
	lim := api.Limits{StallTimeout: shortTimeout, StreamBuffer: 2 * api.StreamPageBytes}
	base, s, a := newLimitedServer(t, lim)
	g := "/v1/groups/wide"
	payload := `"` + strings.Repeat("y", 250<<10) + `"`
	publishReleased(t, &httptest.Server{URL: base, Config: &http.Server{}}, g, payload, 64) // 16 MB
	const readers = 6
	conns := make([]net.Conn, readers)
	for i := range conns {
		conns[i] = stalledReader(t, strings.TrimPrefix(base, "http://"), g+"/output/stream")
	}
	streams := s.Streams()
	deadline := time.Now().Add(30 * time.Second)
	for streams.Ended(api.EndStalled)+streams.Ended(api.EndBusy) < readers {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s only %d of %d readers that never read were ended (stalled %d, busy %d)",
				streams.Ended(api.EndStalled)+streams.Ended(api.EndBusy), readers, streams.Ended(api.EndStalled), streams.Ended(api.EndBusy))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for a.hub.Waiting() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams still open 30 s after their readers stalled", a.hub.Waiting())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stalled %d, busy %d, peak %d bytes of %d", streams.Ended(api.EndStalled), streams.Ended(api.EndBusy), streams.Peak(), lim.StreamBuffer)
	if streams.Ended(api.EndStalled) == 0 {
		t.Fatalf("no reader was cut for stalling (busy %d)", streams.Ended(api.EndBusy))
	}
	if peak := streams.Peak(); peak > lim.StreamBuffer {
		t.Fatalf("streams held %d bytes at once, over the budget of %d", peak, lim.StreamBuffer)
	}
	// What each reader finally reads: whole events up to where it was
	// cut, and, if the budget ended it, an end event naming the reason
	// and the last id it got.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reader %d: %v", i, err)
		}
		r := bufio.NewReader(resp.Body)
		last, n := "0", 0
		for {
			ev, err := nextEvent(r)
			if err != nil {
				break // cut: the reader resumes from its last id
			}
			if ev.name == "end" {
				var end map[string]any
				if err := json.Unmarshal([]byte(ev.data), &end); err != nil || end["reason"] != api.EndBusy || end["lastEventId"] != last || ev.id != last {
					t.Fatalf("reader %d: end event %+v (%v) after id %s", i, ev, err, last)
				}
				t.Logf("reader %d: %d messages, then told %s", i, n, ev.data)
				break
			}
			last, n = ev.id, n+1
		}
	}
	if b := streams.Buffered(); b != 0 {
		t.Fatalf("%d bytes still reserved after every stream ended", b)
	}
}
