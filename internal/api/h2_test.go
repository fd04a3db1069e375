//lint:file-ignore SA1019 xh2Client is x/net/http2's Transport on purpose: the client the ticketing peer's crowd uses, other than net/http's (deprecated since x/net v0.5x, which OpenTelemetry's exporters need)

package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// leanH2 turns the lean HTTP/2 server on in lim (it needs the lean
// HTTP/1.1 loop, which sees the preface).
func leanH2(lim Limits) Limits {
	if lim.Lean == nil {
		lim.Lean = &LeanRoutes{}
	}
	lim.LeanH2 = true
	return lim
}

// h2ModeLean is the subtest name bothH2 gives the lean run;
// startServer turns the lean HTTP/2 server on under it.
const h2ModeLean = "h2lean"

// bothH2 runs f against net/http's HTTP/2 server and the lean one.
func bothH2(t *testing.T, f func(t *testing.T)) {
	t.Run("h2std", f)
	t.Run(h2ModeLean, f)
}

func inLeanH2Mode(t *testing.T) bool {
	return slices.Contains(strings.Split(t.Name(), "/"), h2ModeLean)
}

// xh2Client is golang.org/x/net/http2's own client over h2c.
func xh2Client() *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// corpusHandler answers the differential test's requests.
func corpusHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		fmt.Fprintf(w, "%s %s %d %d|", r.Method, r.Proto, r.ContentLength, len(b))
		w.Write(b)
	})
	mux.HandleFunc("/sniff", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><body>hi</body></html>")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	})
	mux.HandleFunc("/flush", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first ")
		http.NewResponseController(w).Flush()
		io.WriteString(w, "second")
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Why", "none")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/notmodified", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		w.Write(largeBody())
	})
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	})
	return mux
}

func largeBody() []byte {
	b := make([]byte, 1<<20+12345)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

type h2Answer struct {
	status  int
	header  http.Header
	trailer http.Header
	body    []byte
}

func (a h2Answer) String() string {
	return fmt.Sprintf("%d %v trailer %v body %d bytes %.40q", a.status, a.header, a.trailer, len(a.body), a.body)
}

// do sends one request; slow reads the answer a little at a time.
func h2Do(t *testing.T, hc *http.Client, method, url string, body []byte, slow bool) h2Answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var got []byte
	if slow {
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		got, _ = io.ReadAll(resp.Body)
	}
	resp.Header.Del("Date")
	return h2Answer{resp.StatusCode, resp.Header, resp.Trailer, got}
}

// TestH2LeanMatchesNetHTTP: the same requests, through Go's HTTP/2
// client, get the same status, headers (Date aside), trailers and body
// from the lean HTTP/2 server as from net/http's.
func TestH2LeanMatchesNetHTTP(t *testing.T) {
	_, std := startServer(t, corpusHandler(), Limits{}, nil)
	s, lean := startServer(t, corpusHandler(), leanH2(Limits{}), nil)
	n := h2SameAnswersThrough(t, "http://"+std, "http://"+lean, func(bool) *http.Client { return xh2Client() })
	if s.h2.conned.Load() == 0 || s.h2.served.Load() < uint64(n) {
		t.Fatalf("the lean server served %d streams on %d connections", s.h2.served.Load(), s.h2.conned.Load())
	}
}

// h2SameAnswersThrough sends the same requests (corpusHandler's routes)
// to net/http's server at std and the lean one at lean, through the
// client each is given, requires the same answers, and says how many it
// sent.
func h2SameAnswersThrough(t *testing.T, std, lean string, client func(lean bool) *http.Client) int {
	t.Helper()
	small := []byte("a small body")
	big := bytes.Repeat([]byte("0123456789abcdef"), 80<<10/16)
	cases := []struct {
		method, path string
		body         []byte
		slow         bool
	}{
		{"GET", "/echo", nil, false},
		{"POST", "/echo", small, false},
		{"POST", "/echo", big, false},
		{"PUT", "/echo?q=1", []byte{}, false},
		{"HEAD", "/echo", nil, false},
		{"HEAD", "/large", nil, false},
		{"GET", "/sniff", nil, false},
		{"GET", "/json", nil, false},
		{"GET", "/flush", nil, false},
		{"GET", "/trailers", nil, false},
		{"GET", "/nocontent", nil, false},
		{"GET", "/notmodified", nil, false},
		{"GET", "/empty", nil, false},
		{"GET", "/declared", nil, false},
		{"GET", "/missing", nil, false},
		{"GET", "/large", nil, true},
	}
	for _, tc := range cases {
		a := h2Do(t, client(false), tc.method, std+tc.path, tc.body, tc.slow)
		b := h2Do(t, client(true), tc.method, lean+tc.path, tc.body, tc.slow)
		if a.String() != b.String() || !bytes.Equal(a.body, b.body) {
			t.Errorf("%s %s:\n net/http %v\n lean     %v", tc.method, tc.path, a, b)
		}
	}
	return len(cases)
}

// rawH2 is a client connection that speaks frames.
type rawH2 struct {
	net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	// acked: the server's SETTINGS were acknowledged.
	acked bool
}

func dialH2(t *testing.T, addr string) *rawH2 {
	t.Helper()
	return startH2(t, dial(t, addr).Conn)
}

// startH2 sends the client preface and SETTINGS on nc and returns the
// frame client over it.
func startH2(t *testing.T, nc net.Conn) *rawH2 {
	t.Helper()
	c := &rawH2{Conn: nc}
	c.fr = http2.NewFramer(nc, nc)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.buf)
	if _, err := io.WriteString(nc, h2cPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// open sends a request's HEADERS on stream id.
func (c *rawH2) open(t *testing.T, id uint32, method, path string, end bool) {
	t.Helper()
	if err := c.send(id, method, path, end); err != nil {
		t.Fatal(err)
	}
}

// send is open for a goroutine other than the test's, which must not
// call t.Fatal: the error is its to handle.
func (c *rawH2) send(id uint32, method, path string, end bool) error {
	c.buf.Reset()
	for _, kv := range [][2]string{{":method", method}, {":scheme", "http"}, {":authority", "surge"}, {":path", path}} {
		c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndStream: end, EndHeaders: true})
}

// until reads frames until match says stop, acking SETTINGS.
func (c *rawH2) until(t *testing.T, what string, match func(http2.Frame) bool) http2.Frame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(hang))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() && !c.acked {
			c.acked = true
			c.fr.WriteSettingsAck()
		}
		if match(f) {
			return f
		}
	}
}

// TestH2ResetCancelsHandler: a client's RST_STREAM cancels the request's
// context, on either server.
func TestH2ResetCancelsHandler(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		canceled := make(chan struct{})
		entered := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
				close(canceled)
			case <-time.After(hang):
			}
		})
		_, addr := startServer(t, h, Limits{}, nil)
		c := dialH2(t, addr)
		c.open(t, 1, "GET", "/", true)
		<-entered
		c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		select {
		case <-canceled:
		case <-time.After(hang):
			t.Fatal("the handler's context was not cancelled by RST_STREAM")
		}
	})
}

// TestH2ShutdownLetsStreamFinish: Shutdown sends GOAWAY at once, and a
// stream whose handler runs still gets its whole answer.
func TestH2ShutdownLetsStreamFinish(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		entered, release := make(chan struct{}), make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			<-release
			io.WriteString(w, "finished")
		})
		s, addr := startServer(t, h, Limits{}, nil)
		c := dialH2(t, addr)
		c.open(t, 1, "GET", "/", true)
		<-entered
		done := make(chan error, 1)
		go func() { done <- s.Shutdown(context.Background()) }()
		c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		close(release)
		f := c.until(t, "the answer's DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		if d := f.(*http2.DataFrame); string(d.Data()) != "finished" {
			t.Fatalf("DATA %q", d.Data())
		}
		awaitNoError(t, "Shutdown, once the stream was done,", done)
	})
}

// TestH2StreamLimit: a stream over MaxStreams is reset with
// PROTOCOL_ERROR once the client has acknowledged the limit, as
// net/http does.
func TestH2StreamLimit(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release })
		_, addr := startServer(t, h, Limits{MaxStreams: 2}, nil)
		c := dialH2(t, addr)
		c.until(t, "our SETTINGS acked", func(f http2.Frame) bool {
			s, ok := f.(*http2.SettingsFrame)
			return ok && s.IsAck()
		})
		for id := uint32(1); id <= 5; id += 2 {
			c.open(t, id, "GET", "/", true)
		}
		f := c.until(t, "RST_STREAM", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
		if r := f.(*http2.RSTStreamFrame); r.StreamID != 5 || r.ErrCode != http2.ErrCodeProtocol {
			t.Fatalf("got RST_STREAM %v on stream %d, want PROTOCOL_ERROR on 5", r.ErrCode, r.StreamID)
		}
	})
}

// TestH2ClientNotReadingIsCut: a client that grants no send window ends
// its stream at the write timeout (RST_STREAM INTERNAL_ERROR) and the
// handler's write fails, rather than waiting for ever.
func TestH2ClientNotReadingIsCut(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		writeErr := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, err := w.Write(make([]byte, 1<<20))
			if err == nil {
				err = http.NewResponseController(w).Flush()
			}
			writeErr <- err
		})
		_, addr := startServer(t, h, Limits{WriteTimeout: timeout}, nil)
		c := dialH2(t, addr)
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.open(t, 1, "GET", "/", true)
		f := c.until(t, "RST_STREAM", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
		if r := f.(*http2.RSTStreamFrame); r.ErrCode != http2.ErrCodeInternal {
			t.Fatalf("RST_STREAM %v, want INTERNAL_ERROR", r.ErrCode)
		}
		select {
		case err := <-writeErr:
			if err == nil {
				t.Fatal("the handler's write succeeded")
			}
		case <-time.After(hang):
			t.Fatal("the handler's write still waits")
		}
	})
}

// TestH2RapidResetBounded: a client that resets its streams at once
// while their handlers still run gets no more than MaxStreams handlers
// running, and past the bound on waiting ones, GOAWAY
// ENHANCE_YOUR_CALM.
func TestH2RapidResetBounded(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		const maxStreams = 4
		var running, most atomic.Int64
		release := make(chan struct{})
		defer close(release)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
		})
		_, addr := startServer(t, h, Limits{MaxStreams: maxStreams}, nil)
		c := dialH2(t, addr)
		// Acked before the writes below: one writer on the Framer.
		c.until(t, "the server's SETTINGS", func(f http2.Frame) bool {
			s, ok := f.(*http2.SettingsFrame)
			return ok && !s.IsAck()
		})
		// The writer stops at the first write the closed connection
		// refuses, and the test waits for it: a t.Fatal from it after the
		// test returned would panic the whole package.
		written := make(chan struct{})
		go func() {
			defer close(written)
			for id := uint32(1); id < 2*(6*maxStreams+10); id += 2 {
				if c.send(id, "GET", "/", true) != nil || c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
					return
				}
			}
		}()
		defer func() { c.Close(); <-written }()
		f := c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		if g := f.(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
		}
		if m := most.Load(); m > maxStreams {
			t.Fatalf("%d handlers ran at once, more than MaxStreams %d", m, maxStreams)
		}
	})
}

// TestH2PanicResetsStream: a handler's panic resets its stream and the
// connection serves on.
func TestH2PanicResetsStream(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic(http.ErrAbortHandler)
			}
			io.WriteString(w, "ok")
		})
		_, addr := startServer(t, h, Limits{}, nil)
		hc := xh2Client()
		if _, err := hc.Get("http://" + addr + "/panic"); err == nil {
			t.Fatal("a panicking handler's request succeeded")
		}
		if a := h2Do(t, hc, "GET", "http://"+addr+"/ok", nil, false); string(a.body) != "ok" {
			t.Fatalf("after the panic: %v", a)
		}
	})
}

// leanRoute is a mux serving h at pattern as a lean route, and the
// routes for Limits.Lean.
func leanRoute(pattern string, h http.HandlerFunc) (*http.ServeMux, *LeanRoutes) {
	lean := &LeanRoutes{}
	mux := http.NewServeMux()
	lean.mark(mux, pattern)
	mux.HandleFunc(pattern, h)
	return mux, lean
}

// TestH2LeanRouteGetsWholeBody: a request to a lean route is dispatched
// with its whole body held; one whose body outgrows leanBufSize is
// served as it streams; both read it all.
func TestH2LeanRouteGetsWholeBody(t *testing.T) {
	mux, lean := leanRoute("POST /lean", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %v", len(b), err)
	})
	s, addr := startServer(t, mux, leanH2(Limits{Lean: lean}), nil)
	for _, n := range []int{0, 100, leanBufSize, leanBufSize + 1, 200 << 10} {
		a := h2Do(t, xh2Client(), "POST", "http://"+addr+"/lean", bytes.Repeat([]byte("x"), n), false)
		if want := fmt.Sprintf("%d <nil>", n); string(a.body) != want {
			t.Errorf("%d bytes: %q, want %q", n, a.body, want)
		}
	}
	if s.h2.served.Load() != 5 {
		t.Fatalf("lean server ran %d handlers, want 5", s.h2.served.Load())
	}
}

var _ = errors.New

// TestH2PingSettingsAndWindow: a PING is acked with its data, PRIORITY
// is accepted, and a SETTINGS that raises INITIAL_WINDOW_SIZE from 0
// lets an open stream's answer out.
func TestH2PingSettingsAndWindow(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "windowed") })
		_, addr := startServer(t, h, Limits{}, nil)
		c := dialH2(t, addr)
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.fr.WritePriority(1, http2.PriorityParam{StreamDep: 0, Weight: 15})
		c.open(t, 1, "GET", "/", true)
		c.until(t, "the answer's HEADERS", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
		data := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
		c.fr.WritePing(false, data)
		f := c.until(t, "PING ack", func(f http2.Frame) bool {
			if _, ok := f.(*http2.DataFrame); ok {
				t.Fatal("DATA sent beyond a window of 0")
			}
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck()
		})
		if f.(*http2.PingFrame).Data != data {
			t.Fatalf("PING ack carries %v, want %v", f.(*http2.PingFrame).Data, data)
		}
		c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
		f = c.until(t, "DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
		if d := f.(*http2.DataFrame); string(d.Data()) != "windowed" {
			t.Fatalf("DATA %q", d.Data())
		}
	})
}

// TestH2IdleConnGetsGoAway: a connection without streams for the idle
// timeout gets GOAWAY and is closed.
func TestH2IdleConnGetsGoAway(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		_, addr := startServer(t, okHandler(), Limits{IdleTimeout: 200 * time.Millisecond}, nil)
		c := dialH2(t, addr)
		c.open(t, 1, "GET", "/", true)
		c.until(t, "the answer", func(f http2.Frame) bool {
			return f.Header().Flags.Has(http2.FlagDataEndStream) && f.Header().Type == http2.FrameData
		})
		f := c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		if g := f.(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
			t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR, 1", g.ErrCode, g.LastStreamID)
		}
		c.SetReadDeadline(time.Now().Add(hang))
		for {
			if _, err := c.fr.ReadFrame(); err != nil {
				if errors.Is(err, io.EOF) {
					return
				}
				t.Fatalf("after GOAWAY: %v, want the server's close", err)
			}
		}
	})
}

// TestH2BodyStreamsWithFlowControl: a handler that reads a body larger
// than the stream window as it arrives gets all of it (WINDOW_UPDATEs
// as it reads).
func TestH2BodyStreamsWithFlowControl(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d %v", n, err)
		})
		_, addr := startServer(t, h, Limits{}, nil)
		const size = 3<<20 + 7
		a := h2Do(t, xh2Client(), "POST", "http://"+addr+"/", bytes.Repeat([]byte("z"), size), false)
		if want := fmt.Sprintf("%d <nil>", size); string(a.body) != want {
			t.Fatalf("%q, want %q", a.body, want)
		}
	})
}

// TestH2LeanWritesYieldOnce: the lean server's writer yields once per
// flush and writes to the socket past the tracked connection's own
// yield, which would make it twice. Sequential requests each flush once
// (their answer), plus the connection's start (SETTINGS, acks): through
// trackedConn.Write this test counted 42 yields for 20 requests, 21
// without.
func TestH2LeanWritesYieldOnce(t *testing.T) {
	const requests, start = 20, 5
	s, addr := startServer(t, okHandler(), leanH2(Limits{}), nil)
	var yields atomic.Int64
	s.conns.yields.gosched = func() { yields.Add(1) }
	hc := xh2Client()
	for range requests {
		if a := h2Do(t, hc, "GET", "http://"+addr+"/", nil, false); string(a.body) != "ok\n" {
			t.Fatalf("answer %v", a)
		}
	}
	if y := yields.Load(); y == 0 || y > requests+start {
		t.Fatalf("%d yields for %d requests, want at most one per answer (and a few at the start)", y, requests)
	}
}

// TestH2LeanPrefaceWithinHeaderTimeout: a client that starts the h2c
// preface and stops is closed at the header timeout.
func TestH2LeanPrefaceWithinHeaderTimeout(t *testing.T) {
	s, addr := startServer(t, okHandler(), leanH2(Limits{ReadHeaderTimeout: 200 * time.Millisecond}), nil)
	c := dial(t, addr)
	if _, err := io.WriteString(c, h2cPreface[:20]); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(hang))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("waiting for the close: %v", err)
	}
	if s.h2.conned.Load() != 1 {
		t.Fatal("the connection did not reach the lean HTTP/2 server")
	}
}

// TestH2HeaderListTooLarge: a header list over MaxHeaderBytes (and
// HTTP/2's allowance) is answered 431, as net/http answers it.
func TestH2HeaderListTooLarge(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		_, addr := startServer(t, okHandler(), Limits{}, nil)
		c := dialH2(t, addr)
		c.buf.Reset()
		for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "surge"}, {":path", "/"}} {
			c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		for i := range MaxHeaderBytes/4096 + 2 {
			c.enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: strings.Repeat("b", 4096)})
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		f := c.until(t, "the answer", func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
		if st := f.(*http2.MetaHeadersFrame).PseudoValue("status"); st != "431" {
			t.Fatalf(":status %s, want 431", st)
		}
	})
}

// TestH2RequestTrailers: a request's declared trailers reach the
// handler once it has read the body.
func TestH2RequestTrailers(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %v %q", b, err, r.Trailer.Get("X-Check"))
		})
		_, addr := startServer(t, h, Limits{}, nil)
		req, _ := http.NewRequest("POST", "http://"+addr+"/", nil)
		req.Trailer = http.Header{"X-Check": nil}
		req.Body = io.NopCloser(&trailerSetter{r: strings.NewReader("body"), set: func() { req.Trailer.Set("X-Check", "sum") }})
		resp, err := xh2Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != `body <nil> "sum"` {
			t.Fatalf("answer %q", b)
		}
	})
}

// trailerSetter sets the request's trailer when its body ends.
type trailerSetter struct {
	r   io.Reader
	set func()
}

func (s *trailerSetter) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.set()
	}
	return n, err
}

// TestH2LeanRecordResetBeforeDispatch: a lean route's stream reset by
// the client before its body is complete never reaches the handler, and
// the connection serves on.
func TestH2LeanRecordResetBeforeDispatch(t *testing.T) {
	var ran atomic.Int64
	mux, lean := leanRoute("POST /lean", func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		io.WriteString(w, "served")
	})
	s, addr := startServer(t, mux, leanH2(Limits{Lean: lean}), nil)
	c := dialH2(t, addr)
	c.open(t, 1, "POST", "/lean", false)
	c.fr.WriteData(1, false, []byte("part"))
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	c.open(t, 3, "POST", "/lean", false)
	c.fr.WriteData(3, true, []byte("whole"))
	f := c.until(t, "stream 3's answer", func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 3 })
	if d := f.(*http2.DataFrame); string(d.Data()) != "served" {
		t.Fatalf("DATA %q", d.Data())
	}
	if n := ran.Load(); n != 1 || s.h2.served.Load() != 1 {
		t.Fatalf("the handler ran %d times (lean server: %d), want once: for stream 3", n, s.h2.served.Load())
	}
}

// TestH2FrameTooLarge: a frame over our SETTINGS_MAX_FRAME_SIZE is a
// connection error: GOAWAY FRAME_SIZE_ERROR reaches the client before
// the close.
func TestH2FrameTooLarge(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		_, addr := startServer(t, okHandler(), Limits{}, nil)
		c := dialH2(t, addr)
		size := 2 << 20 // the header only: the server must not wait for the payload
		if _, err := c.Write([]byte{byte(size >> 16), byte(size >> 8), byte(size), 0x0, 0x0, 0, 0, 0, 1}); err != nil {
			t.Fatal(err)
		}
		f := c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		if g := f.(*http2.GoAwayFrame); g.ErrCode != http2.ErrCodeFrameSize {
			t.Fatalf("GOAWAY %v, want FRAME_SIZE_ERROR", g.ErrCode)
		}
	})
}

// TestH2PingFloodCut: a client that sends PINGs and never reads their
// acks is cut once h2MaxQueuedControl of them wait for the socket.
// (net/http's bound is the same, but reached only sometimes within the
// test's deadline, so the test runs on the lean server only.)
// h2PingFloodHang bounds TestH2PingFloodCut's flood.
const h2PingFloodHang = 2 * time.Minute

func TestH2PingFloodCut(t *testing.T) {
	_, addr := startServer(t, okHandler(), leanH2(Limits{}), nil)
	c := dialH2(t, addr)
	// The client's receive buffer is left as it is: at 4 KiB (set once to
	// fill it sooner) the loopback connection's pings stopped reaching
	// the server now and then until TCP's retransmission backed off for
	// ~107 s, and the run took that long, near its deadline.
	// The cut comes once the socket's buffers hold megabytes of acks and
	// 10,000 more are queued: under the race detector on a busy machine,
	// longer than hang.
	c.SetWriteDeadline(time.Now().Add(h2PingFloodHang))
	var err error
	for i := 0; err == nil; i++ {
		err = c.fr.WritePing(false, [8]byte{byte(i)})
	}
	if isTimeout(err) {
		t.Fatal("the server still reads a client that never reads its acks")
	}
}

// TestH2LeanSettingsAsNetHTTP: the lean server opens a connection with
// the SETTINGS and connection WINDOW_UPDATE net/http's sends.
func TestH2LeanSettingsAsNetHTTP(t *testing.T) {
	opening := func(addr string) string {
		c := dialH2(t, addr)
		var got []string
		c.until(t, "the connection's WINDOW_UPDATE", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.SettingsFrame:
				f.ForeachSetting(func(s http2.Setting) error { got = append(got, s.String()); return nil })
			case *http2.WindowUpdateFrame:
				got = append(got, fmt.Sprintf("WINDOW_UPDATE %d +%d", f.StreamID, f.Increment))
				return true
			}
			return false
		})
		return strings.Join(got, ", ")
	}
	lim := Limits{MaxStreams: 77}
	_, std := startServer(t, okHandler(), lim, nil)
	_, lean := startServer(t, okHandler(), leanH2(lim), nil)
	if a, b := opening(std), opening(lean); a != b {
		t.Fatalf("net/http opens with %s\nlean opens with %s", a, b)
	}
}

// TestH2LeanRoutesGetTheirPathValues: lean routes served by the lean
// HTTP/2 server, dispatched with the match that routed them, see the
// pattern and path values net/http's server gives them, escaped ones
// and a route the match cannot take (a {rest...}) included, on one
// connection whose memo keeps changing.
func TestH2LeanRoutesGetTheirPathValues(t *testing.T) {
	h, lean := h1TestMux()
	_, std := startServer(t, h, h1Limits(Limits{}), nil)
	s, leanAddr := startServer(t, h, h1Limits(leanH2(Limits{Lean: lean})), nil)
	std, leanAddr = "http://"+std, "http://"+leanAddr
	paths := []string{"/items/1", "/items/a%2Fb", "/items/%C3%A9", "/pair/x/and/y", "/pair/lit/and/z",
		"/tree/a/b%2Fc", "/items/1", "/items/2", "/pair/x/and/y"}
	stdc, leanc := xh2Client(), xh2Client()
	for range 3 {
		for _, p := range paths {
			a := h2Do(t, stdc, "GET", std+p, nil, false)
			b := h2Do(t, leanc, "GET", leanAddr+p, nil, false)
			// The bodies differ only in the host each server was asked as.
			b.body = bytes.ReplaceAll(b.body, []byte(strings.TrimPrefix(leanAddr, "http://")), []byte(strings.TrimPrefix(std, "http://")))
			if a.status != b.status || !bytes.Equal(a.body, b.body) {
				t.Errorf("GET %s:\n net/http %d %q\n lean     %d %q", p, a.status, a.body, b.status, b.body)
			}
			if !bytes.Contains(b.body, []byte("pattern=")) || bytes.Contains(b.body, []byte(`id=""`)) && p != "/tree/a/b%2Fc" {
				t.Errorf("GET %s: the route saw %q", p, b.body)
			}
		}
	}
	if s.h2.served.Load() < uint64(3*len(paths)) {
		t.Fatalf("the lean HTTP/2 server served %d streams", s.h2.served.Load())
	}
}

// TestH2ClientNotReadingFreesItsSlot: the in-flight slots bound the
// handlers' work, not the clients' reading. A client that opens streams
// with a shut window (SETTINGS_INITIAL_WINDOW_SIZE 0) and never reads
// made each handler wait with its slot until the write timeout, so
// enough of them took every slot and nobody else was served. A handler
// whose answer waits for its client's window lends its slot back, up to
// as many as there are slots; one more keeps its slot.
func TestH2ClientNotReadingFreesItsSlot(t *testing.T) {
	const slots = 2
	entered := make(chan struct{}, slots+1)
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		w.Write(make([]byte, 64<<10))
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	s, addr := startServer(t, mux, leanH2(Limits{MaxInflight: slots, WriteTimeout: time.Hour}), nil)
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for i := range slots + 1 {
		c.open(t, uint32(2*i+1), "GET", "/big", true)
	}
	for range slots + 1 {
		select {
		case <-entered:
		case <-time.After(hang):
			t.Fatal("the handlers of the unread streams did not all start: their slots are still held")
		}
	}
	hc := xh2Client()
	hc.Timeout = hang
	resp, err := hc.Get("http://" + addr + "/small")
	if err != nil {
		t.Fatalf("another client's request while %d streams wait for their reader: %v", slots+1, err)
	}
	resp.Body.Close()
	l := s.inflight
	// The one that kept its slot may have lost its stream already
	// (keptStall) on a slow machine: then none is held.
	if lent, held := l.lent.Load(), l.n.Load(); lent != slots || held > 1 {
		t.Fatalf("%d slots lent and %d held by the waiting handlers; want %d lent (the bound) and at most 1 held", lent, held, slots)
	}
	c.Close()
	deadline := time.Now().Add(hang)
	for l.lent.Load() != 0 || l.lentB.Load() != 0 || l.n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the reader left, %d slots still lent and %d held", l.lent.Load(), l.n.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestH2StalledAnswerIsReset: an answer that waits for its client's
// window with no progress for --stall-timeout loses its stream, as a
// stream's or long poll's write does, rather than holding its handler
// and answer until the write timeout; one whose handler kept its slot
// (its lending refused: here the one lendable slot is lent already)
// loses it after keptStall.
func TestH2StalledAnswerIsReset(t *testing.T) {
	entered := make(chan struct{}, 2)
	writeErr := make(chan error, 2)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		_, err := w.Write(make([]byte, 64<<10))
		writeErr <- err
	})
	for _, tc := range []struct {
		name string
		lim  Limits
	}{
		{"stall timeout", Limits{StallTimeout: 200 * time.Millisecond, WriteTimeout: time.Hour}},
		{"kept slot", Limits{MaxInflight: 1, StallTimeout: time.Hour, WriteTimeout: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := startServer(t, h, leanH2(tc.lim), nil)
			c := dialH2(t, addr)
			c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			streams := 1
			if tc.lim.MaxInflight == 1 {
				streams = 2 // the first lends the one slot, the second keeps it
			}
			for i := range streams {
				c.open(t, uint32(2*i+1), "GET", "/", true)
				<-entered
			}
			f := c.until(t, "RST_STREAM", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
			if want := uint32(2*streams - 1); f.Header().StreamID != want {
				t.Fatalf("stream %d reset, want %d", f.Header().StreamID, want)
			}
			select {
			case err := <-writeErr:
				if err == nil {
					t.Fatal("the stalled answer's write succeeded")
				}
			case <-time.After(hang):
				t.Fatal("the stalled answer's write still waits")
			}
			c.Close()
		})
	}
}

// TestH2TurnWaitersGiveTheirSlotsBack: on the lean HTTP/2 server too, a
// stream waiting for a turn gives its in-flight slot back meanwhile.
func TestH2TurnWaitersGiveTheirSlotsBack(t *testing.T) {
	turns, mux := turnsMux()
	s, addr := startServer(t, mux, leanH2(Limits{MaxInflight: 2}), nil)
	hc := xh2Client()
	hc.Timeout = hang
	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := hc.Get("http://" + addr + "/turn")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			done <- err
		}()
	}
	waitFor(t, func() bool { return turns.waiting.Load() == 2 })
	if n := s.inflight.n.Load(); n != 0 {
		t.Fatalf("%d slots held by streams waiting for a turn", n)
	}
	resp, err := hc.Get("http://" + addr + "/small")
	if err != nil {
		t.Fatalf("a small request while both slots' streams wait for a turn: %v", err)
	}
	resp.Body.Close()
	turns.Give()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a waiter once turns free: %v", err)
		}
	}
}
