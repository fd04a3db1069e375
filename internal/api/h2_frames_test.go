package api_test

// The raw-frame differential between net/http's HTTP/2 server and the
// lean one (Limits.LeanH2), and the raw HTTP/2 client it shares with
// h2spec_test.go and h2_fuzz_test.go. These tests live in the external
// test package: they see only what a client sees, and share no names
// with the lean server (h2*.go).

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
)

// h2Hang only catches a hang; no test asserts a duration.
const h2Hang = 10 * time.Second

const h2Preface = http2.ClientPreface

// h2Window is the client's flow-control window, stream and connection:
// large, so that no answer in these tests waits for a WINDOW_UPDATE.
const h2Window = 1 << 30

// h2ClientMaxFrame is HTTP/2's initial SETTINGS_MAX_FRAME_SIZE, which
// the client keeps.
const h2ClientMaxFrame = 16384

// h2DefaultWindow is HTTP/2's initial window, stream and connection.
const h2DefaultWindow = 65535

// h2Mode is one of the two servers every test compares.
type h2Mode struct {
	name string
	lean bool
}

var h2Modes = []h2Mode{{"net/http", false}, {"lean", true}}

// h2Routes are handlers like the real ones (metered by api.Metrics, JSON
// or text with a Content-Type set), with the behaviours a frame sequence
// can meet: reading and echoing a body, flushing, trailers, waiting until
// the client gives up (with or without its answer's head sent), not giving up until stuck closes, and a large
// answer.
func h2Routes(m *api.Metrics, mux *http.ServeMux, stuck <-chan struct{}) {
	m.HandleLean(mux, "/", func(w http.ResponseWriter, r *http.Request) int {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
		return http.StatusOK
	})
	m.Handle(mux, "/echo", h2Echo)
	m.Handle(mux, "/flush", func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, part := range []string{"one ", "two ", "three\n"} {
			io.WriteString(w, part)
			http.NewResponseController(w).Flush()
		}
		return http.StatusOK
	})
	m.Handle(mux, "/trailers", func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "body\n")
		w.Header().Set("X-Sum", "42")
		return http.StatusOK
	})
	m.Handle(mux, "/sleep", func(w http.ResponseWriter, r *http.Request) int {
		<-r.Context().Done()
		return http.StatusOK
	})
	m.Handle(mux, "/hold", func(w http.ResponseWriter, r *http.Request) int {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		return http.StatusOK
	})
	m.Handle(mux, "/stuck", func(w http.ResponseWriter, r *http.Request) int {
		<-stuck
		return http.StatusOK
	})
	m.Handle(mux, "/big", func(w http.ResponseWriter, r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Type", "application/octet-stream")
		chunk := bytes.Repeat([]byte("x"), 32<<10)
		for ; n > 0; n -= len(chunk) {
			if _, err := w.Write(chunk[:min(n, len(chunk))]); err != nil {
				return http.StatusOK
			}
		}
		return http.StatusOK
	})
}

// h2Echo answers what the handler saw of the request: what a lean server
// hands a handler must be what net/http hands it.
func h2Echo(w http.ResponseWriter, r *http.Request) int {
	body, err := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "body: %v\n", err)
		return http.StatusBadRequest
	}
	tr := make([]string, 0, len(r.Trailer))
	for k, v := range r.Trailer {
		tr = append(tr, k+"="+strings.Join(v, ","))
	}
	sort.Strings(tr)
	fmt.Fprintf(w, "%s %s host=%q proto=%d length=%d cookie=%q x=%q te=%q body=%q trailer=%v\n",
		r.Method, r.URL.RequestURI(), r.Host, r.ProtoMajor, r.ContentLength,
		r.Header.Values("Cookie"), r.Header.Values("X-Test"), r.Header.Values("Te"), body, tr)
	return http.StatusOK
}

// h2Serve serves h2Routes within lim on a loopback port, with the lean
// HTTP/2 server when lean (Limits.LeanH2; it needs the lean HTTP/1.1
// routes, which h2Routes marks), until the test ends; /stuck holds its
// handlers until then.
func h2Serve(tb testing.TB, lean bool, lim api.Limits) string {
	tb.Helper()
	stuck := make(chan struct{})
	tb.Cleanup(func() { close(stuck) })
	return h2ServeStuck(tb, lean, lim, stuck)
}

// h2ServeStuck is h2Serve with /stuck holding its handlers until stuck
// closes.
func h2ServeStuck(tb testing.TB, lean bool, lim api.Limits, stuck <-chan struct{}) string {
	tb.Helper()
	mux := http.NewServeMux()
	m := api.NewMetrics(prometheus.NewRegistry())
	h2Routes(m, mux, stuck)
	lim.Lean, lim.LeanH2 = m.Lean(), lean
	reg := prometheus.NewRegistry()
	s := api.NewServer("127.0.0.1:0", mux, lim, reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	h2Registries.Store(ln.Addr().String(), reg)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	tb.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			tb.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// h2Registries are the servers' metrics by address, for scripts that
// wait for a server's state (awaitWaiting).
var h2Registries sync.Map // string -> *prometheus.Registry

// awaitWaiting waits until n requests wait in the server's waiting room
// (surge_http_waiting_requests): a script that cancels a waiter knows
// it is in the room, and then that it has left, whatever the timing of
// the server's goroutines.
func (c *h2Client) awaitWaiting(n int) {
	c.tb.Helper()
	reg, _ := h2Registries.Load(c.conn.RemoteAddr().String())
	deadline := time.Now().Add(h2Hang)
	for {
		mfs, err := reg.(*prometheus.Registry).Gather()
		if err != nil {
			c.tb.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "surge_http_waiting_requests" && int(mf.GetMetric()[0].GetGauge().GetValue()) == n {
				return
			}
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("%d requests never waited in the room at once", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// h2Event is one frame from the server, copied out of the Framer's
// buffers, or the error that ended reading.
type h2Event struct {
	typ        http2.FrameType
	flags      http2.Flags
	stream     uint32
	fields     []hpack.HeaderField
	data       []byte
	code       http2.ErrCode
	lastStream uint32
	settings   []http2.Setting
	length     uint32
	err        error
}

// h2Client writes frames with its own Framer and reads the server's on a
// goroutine of its own. Without a connection (h2Recorder) it only records
// the bytes its script writes: the fuzz seeds.
type h2Client struct {
	tb     testing.TB
	conn   net.Conn
	fr     *http2.Framer
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
	events chan h2Event
	obs    h2Obs
	// What the script needs to know about the server and its streams.
	maxFrame uint32
	opened   map[uint32]bool // streams the client opened and did not reset
	ended    map[uint32]bool // streams the server ended (END_STREAM or RST_STREAM)
	goAway   bool
	// The highest stream the server sent a frame on, and the last stream
	// of its GOAWAY after a connection error (-1 before one).
	maxAnswered uint32
	errLast     int64
	closed      bool
	pings       map[[8]byte]bool
	nextID      uint32
	// The flow-control credit the client has given, counted when sent
	// (so never more than the server has seen), which DATA must not pass.
	initWindow, connWindow int64
	streamWindow           map[uint32]int64
}

func newH2Client(tb testing.TB, w io.Writer) *h2Client {
	c := &h2Client{tb: tb, maxFrame: 16384, opened: map[uint32]bool{}, ended: map[uint32]bool{},
		pings: map[[8]byte]bool{}, nextID: 1, errLast: -1,
		initWindow: h2DefaultWindow, connWindow: h2DefaultWindow, streamWindow: map[uint32]int64{}}
	c.fr = http2.NewFramer(w, nil)
	c.fr.AllowIllegalWrites = true
	c.enc = hpack.NewEncoder(&c.hbuf)
	c.obs.streams = map[uint32]*h2StreamObs{}
	return c
}

// h2Recorder is a client whose script's frames land in a buffer.
func h2Recorder(tb testing.TB) (*h2Client, *bytes.Buffer) {
	var b bytes.Buffer
	return newH2Client(tb, &b), &b
}

// h2Dial connects, sends the preface and SETTINGS (default: a window of
// h2Window, the connection's too), and waits for
// the server's SETTINGS and its ACK of ours, so every script starts on a
// connection whose settings both ends know.
func h2Dial(tb testing.TB, addr string, settings ...http2.Setting) *h2Client {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, h2Hang)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	c := newH2Client(tb, conn)
	c.conn = conn
	c.events = make(chan h2Event, 64)
	go c.read()
	if _, err := io.WriteString(conn, h2Preface); err != nil {
		tb.Fatal(err)
	}
	if settings == nil {
		settings = []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: h2Window}}
	}
	c.settings(settings...)
	c.windowUpdate(0, h2Window)
	var gotSettings, gotAck bool
	c.drain(func() bool {
		for _, l := range c.obs.conn {
			gotSettings = gotSettings || strings.HasPrefix(l, "SETTINGS ") || l == "SETTINGS"
			gotAck = gotAck || l == "SETTINGS ACK"
		}
		return gotSettings && gotAck
	})
	if !gotSettings || !gotAck {
		tb.Fatalf("handshake: %s", c.obs.String())
	}
	c.check(c.fr.WriteSettingsAck())
	return c
}

// read turns the server's frames into events until the connection ends.
func (c *h2Client) read() {
	defer close(c.events)
	fr := http2.NewFramer(nil, c.conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	// The client never raises SETTINGS_MAX_FRAME_SIZE: a larger frame
	// from the server is its error, reported as a bad frame.
	fr.SetMaxReadFrameSize(h2ClientMaxFrame)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.events <- h2Event{err: err}
			return
		}
		c.events <- h2EventOf(f)
	}
}

func h2EventOf(f http2.Frame) h2Event {
	h := f.Header()
	ev := h2Event{typ: h.Type, flags: h.Flags, stream: h.StreamID, length: h.Length}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		ev.fields = append([]hpack.HeaderField(nil), f.Fields...)
	case *http2.DataFrame:
		ev.data = append([]byte(nil), f.Data()...)
	case *http2.RSTStreamFrame:
		ev.code = f.ErrCode
	case *http2.GoAwayFrame:
		ev.code, ev.lastStream = f.ErrCode, f.LastStreamID
	case *http2.SettingsFrame:
		f.ForeachSetting(func(s http2.Setting) error { ev.settings = append(ev.settings, s); return nil })
	case *http2.PingFrame:
		ev.data = append([]byte(nil), f.Data[:]...)
	}
	return ev
}

// drain applies the server's events until done says so, the connection
// ends, or h2Hang passes (recorded, so a hang shows as a difference).
func (c *h2Client) drain(done func() bool) {
	if c.events == nil {
		return
	}
	timer := time.NewTimer(h2Hang)
	defer timer.Stop()
	for !c.closed && !done() {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.closed = true
				return
			}
			c.apply(ev)
		case <-timer.C:
			c.obs.conn = append(c.obs.conn, "no answer within the hang guard")
			return
		}
	}
}

func (c *h2Client) apply(ev h2Event) {
	if ev.err != nil {
		c.closed = true
		c.obs.end = h2EndOf(ev.err)
		return
	}
	switch ev.typ {
	case http2.FrameWindowUpdate:
	case http2.FrameHeaders, http2.FrameData, http2.FrameRSTStream:
		c.applyStream(ev)
	case http2.FrameSettings:
		c.applySettings(ev)
	case http2.FramePing:
		var p [8]byte
		copy(p[:], ev.data)
		switch {
		case ev.flags.Has(http2.FlagPingAck) && c.pings[p]:
			c.obs.conn = append(c.obs.conn, "PING ACK (echo)")
		default:
			c.obs.conn = append(c.obs.conn, fmt.Sprintf("PING flags=%v payload=%x", ev.flags, ev.data))
		}
	case http2.FrameGoAway:
		c.applyGoAway(ev)
	default:
		c.obs.conn = append(c.obs.conn, fmt.Sprintf("%v flags=%v stream=%d", ev.typ, ev.flags, ev.stream))
	}
}

// h2EndOf names how reading ended: a clean close and a reset both close
// the connection (which one depends on unread bytes in the server's
// socket, not on the server); anything else is a frame the client's
// Framer refused.
func h2EndOf(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.As(err, &ne) && !ne.Timeout(), strings.Contains(err.Error(), "connection reset"):
		return "closed"
	}
	return "bad frame from the server: " + err.Error()
}

// applySettings keeps the settings that change what a client may send
// (the window and frame sizes and the HPACK table are tuning, which may
// differ); it notes the largest frame the server reads for the scripts.
func (c *h2Client) applySettings(ev h2Event) {
	if ev.flags.Has(http2.FlagSettingsAck) {
		c.obs.conn = append(c.obs.conn, "SETTINGS ACK")
		return
	}
	var kept []string
	for _, s := range ev.settings {
		switch s.ID {
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		case http2.SettingMaxConcurrentStreams, http2.SettingEnablePush, http2.SettingEnableConnectProtocol:
			kept = append(kept, s.String())
		}
	}
	sort.Strings(kept)
	c.obs.conn = append(c.obs.conn, strings.TrimSpace("SETTINGS "+strings.Join(kept, " ")))
}

// applyGoAway keeps a graceful GOAWAY's last stream, which promises the
// streams up to it an answer. After a connection error the last stream
// need only cover every stream the server answered (RFC 9113 6.8): net/http
// names there a stream it refused unopened (HEADERS on stream 2, DATA or
// RST_STREAM on idle stream 1, a header block it cannot decode), where 0
// is as right; and after ENHANCE_YOUR_CALM it depends on how many
// handlers had ended.
func (c *h2Client) applyGoAway(ev h2Event) {
	c.goAway = true
	if ev.code == http2.ErrCodeNo {
		c.obs.conn = append(c.obs.conn, fmt.Sprintf("GOAWAY last=%d %v", ev.lastStream, ev.code))
		return
	}
	c.obs.conn = append(c.obs.conn, fmt.Sprintf("GOAWAY %v", ev.code))
	c.errLast = int64(ev.lastStream)
	if c.maxAnswered > ev.lastStream {
		c.obs.conn = append(c.obs.conn, fmt.Sprintf("GOAWAY's last stream %d is below stream %d, answered", ev.lastStream, c.maxAnswered))
	}
}

func (c *h2Client) applyStream(ev h2Event) {
	if c.errLast >= 0 && int64(ev.stream) > c.errLast {
		c.obs.conn = append(c.obs.conn, fmt.Sprintf("stream %d answered after a GOAWAY naming %d last", ev.stream, c.errLast))
	}
	c.maxAnswered = max(c.maxAnswered, ev.stream)
	st := c.obs.stream(ev.stream)
	switch ev.typ {
	case http2.FrameHeaders:
		st.add("HEADERS " + h2Fields(ev.fields))
	case http2.FrameData:
		st.addData(ev.data)
		c.spend(ev.stream, int64(ev.length))
	case http2.FrameRSTStream:
		st.add("RST_STREAM " + ev.code.String())
		c.ended[ev.stream] = true
	}
	if ev.flags.Has(http2.FlagDataEndStream) {
		st.add("END_STREAM")
		c.ended[ev.stream] = true
	}
}

// h2Fields renders a header block without its date, which differs by
// the second, in a stable order (HTTP header order carries no meaning
// between different names).
func h2Fields(fields []hpack.HeaderField) string {
	var out []string
	for _, f := range fields {
		if f.Name != "date" {
			out = append(out, f.Name+": "+f.Value)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		pi, pj := strings.HasPrefix(out[i], ":"), strings.HasPrefix(out[j], ":")
		if pi != pj {
			return pi
		}
		return strings.SplitN(out[i], ":", 2)[0] < strings.SplitN(out[j], ":", 2)[0]
	})
	return "{" + strings.Join(out, "; ") + "}"
}

// h2Obs is what a client observed of one connection, normalised.
type h2Obs struct {
	conn    []string
	streams map[uint32]*h2StreamObs
	end     string
}

type h2StreamObs struct {
	items []string
	data  []byte // DATA received since the last other item: frame splits are the server's choice
	total int    // DATA bytes received in all
}

func (o *h2Obs) stream(id uint32) *h2StreamObs {
	st := o.streams[id]
	if st == nil {
		st = &h2StreamObs{}
		o.streams[id] = st
	}
	return st
}

func (s *h2StreamObs) flush() {
	if len(s.data) > 0 {
		s.items = append(s.items, fmt.Sprintf("DATA %q", h2Abbrev(s.data)))
		s.data = nil
	}
}

func (s *h2StreamObs) add(item string) { s.flush(); s.items = append(s.items, item) }

func (s *h2StreamObs) addData(p []byte) { s.data = append(s.data, p...); s.total += len(p) }

// h2Abbrev keeps a large body's report short: its length and ends.
func h2Abbrev(p []byte) string {
	if len(p) <= 256 {
		return string(p)
	}
	return fmt.Sprintf("%s...(%d bytes)...%s", p[:64], len(p), p[len(p)-64:])
}

func (o *h2Obs) String() string {
	var b strings.Builder
	for _, l := range o.conn {
		fmt.Fprintf(&b, "conn: %s\n", l)
	}
	ids := make([]uint32, 0, len(o.streams))
	for id := range o.streams {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		st := o.streams[id]
		st.flush()
		for _, it := range st.items {
			fmt.Fprintf(&b, "stream %d: %s\n", id, it)
		}
	}
	fmt.Fprintf(&b, "end: %s\n", cmp.Or(o.end, "open"))
	return b.String()
}

// unordered renders the streams without their ids, sorted: for sequences
// whose requests race for an in-flight slot, where which stream wins is
// the scheduler's choice but what each outcome looks like is not.
func (o *h2Obs) unordered() string {
	var b strings.Builder
	for _, l := range o.conn {
		fmt.Fprintf(&b, "conn: %s\n", l)
	}
	var streams []string
	for _, st := range o.streams {
		st.flush()
		streams = append(streams, "stream: "+strings.Join(st.items, "\n        "))
	}
	sort.Strings(streams)
	fmt.Fprintf(&b, "%s\nend: %s\n", strings.Join(streams, "\n"), cmp.Or(o.end, "open"))
	return b.String()
}

// check stops a recording (h2Recorder) at a write error. On a
// connection the script goes on: a write fails once the server has
// closed, and what it answered before is the observation.
func (c *h2Client) check(err error) {
	if err != nil && c.conn == nil {
		c.tb.Fatal(err)
	}
}

// h2Req is a request's header fields: the four pseudo-headers, then extra
// name, value pairs.
func h2Req(method, path string, extra ...string) []string {
	return append([]string{":method", method, ":scheme", "http", ":authority", "surge", ":path", path}, extra...)
}

// block HPACK-encodes name, value pairs as they are, upper case and all.
func (c *h2Client) block(fields ...string) []byte {
	c.hbuf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(c.hbuf.Bytes())
}

// headers sends one HEADERS frame (END_HEADERS set) on stream id.
func (c *h2Client) headers(id uint32, end bool, fields ...string) {
	c.opening(id)
	c.nextID = max(c.nextID, id+2)
	c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(fields...), EndStream: end, EndHeaders: true}))
}

// opening notes a stream the client opens, with the window it starts with.
func (c *h2Client) opening(id uint32) {
	c.opened[id] = true
	if _, ok := c.streamWindow[id]; !ok {
		c.streamWindow[id] = c.initWindow
	}
}

// settings sends SETTINGS; a new initial window moves every open
// stream's window by the difference (RFC 9113 6.9.2).
func (c *h2Client) settings(settings ...http2.Setting) {
	c.check(c.fr.WriteSettings(settings...))
	for _, st := range settings {
		if st.ID != http2.SettingInitialWindowSize || st.Val > 1<<31-1 {
			continue
		}
		delta := int64(st.Val) - c.initWindow
		c.initWindow = int64(st.Val)
		for id := range c.streamWindow {
			c.streamWindow[id] += delta
		}
	}
}

// windowUpdate gives the server n more bytes of credit on stream id (0:
// the connection).
func (c *h2Client) windowUpdate(id, n uint32) {
	c.check(c.fr.WriteWindowUpdate(id, n))
	if id == 0 {
		c.connWindow += int64(n)
	} else if _, ok := c.streamWindow[id]; ok {
		c.streamWindow[id] += int64(n)
	}
}

const h2WindowPassed = "DATA beyond the flow-control window"

// h2SameAnswers checks one case's observations of the two servers (in
// h2Modes' order): neither sent beyond the client's window, net/http's
// shows what the case is about (want), and the lean one's is the same.
func h2SameAnswers(t *testing.T, obs [2]string, want []string) {
	t.Helper()
	for i, m := range h2Modes {
		if strings.Contains(obs[i], h2WindowPassed) {
			t.Errorf("%s server sent DATA beyond the client's flow-control window:\n%s", m.name, obs[i])
		}
	}
	for _, w := range want {
		if !strings.Contains(obs[0], w) {
			t.Errorf("net/http's answer lacks %q: the case does not test what it is named for:\n%s", w, obs[0])
		}
	}
	if obs[0] != obs[1] {
		t.Errorf("net/http's server:\n%s\nthe lean one:\n%s", obs[0], obs[1])
	}
}

// spend takes a DATA frame's n bytes from the credit, noting a server
// that sends beyond it.
func (c *h2Client) spend(id uint32, n int64) {
	if w, ok := c.streamWindow[id]; ok && n > w || n > c.connWindow {
		c.obs.conn = append(c.obs.conn, fmt.Sprintf("%s on stream %d", h2WindowPassed, id))
	}
	c.streamWindow[id] -= n
	c.connWindow -= n
}

// awaitData waits until stream id has brought n bytes of DATA.
func (c *h2Client) awaitData(id uint32, n int) {
	c.drain(func() bool { return c.obs.stream(id).total >= n })
}

// awaitSettingsAcks waits until the server has acknowledged n SETTINGS.
func (c *h2Client) awaitSettingsAcks(n int) {
	c.drain(func() bool { return h2CountLines(c.obs.conn, "SETTINGS ACK") >= n })
}

func h2CountLines(lines []string, l string) (n int) {
	for _, x := range lines {
		if x == l {
			n++
		}
	}
	return n
}

// open starts a request on the next stream and returns its id.
func (c *h2Client) open(method, path string, end bool, extra ...string) uint32 {
	id := c.nextID
	c.headers(id, end, h2Req(method, path, extra...)...)
	return id
}

func (c *h2Client) data(id uint32, end bool, p string) {
	c.check(c.fr.WriteData(id, end, []byte(p)))
}

func (c *h2Client) raw(t http2.FrameType, flags http2.Flags, id uint32, payload []byte) {
	c.check(c.fr.WriteRawFrame(t, flags, id, payload))
}

// rst cancels a stream the client opened: the script no longer waits for it.
func (c *h2Client) rst(id uint32, code http2.ErrCode) {
	delete(c.opened, id)
	c.check(c.fr.WriteRSTStream(id, code))
}

func (c *h2Client) ping(p string) {
	var b [8]byte
	copy(b[:], p)
	c.pings[b] = true
	c.check(c.fr.WritePing(false, b))
}

// await waits until the server has ended each stream (or the connection).
func (c *h2Client) await(ids ...uint32) {
	c.drain(func() bool {
		for _, id := range ids {
			if !c.ended[id] {
				return false
			}
		}
		return true
	})
}

// awaitHeaders waits until the server has sent stream id's head.
func (c *h2Client) awaitHeaders(id uint32) {
	c.drain(func() bool {
		st := c.obs.streams[id]
		return st != nil && len(st.items) > 0
	})
}

// finish waits for every stream the client left open to end, then for the
// answer to a last PING, which the server sends after every frame it
// wrote before; after a GOAWAY it waits for the server to close instead.
func (c *h2Client) finish() *h2Obs {
	ids := make([]uint32, 0, len(c.opened))
	for id := range c.opened {
		ids = append(ids, id)
	}
	c.await(ids...)
	if !c.closed && !c.goAway {
		c.ping("barrier!")
		n := len(c.obs.conn)
		c.drain(func() bool {
			for _, l := range c.obs.conn[n:] {
				if l == "PING ACK (echo)" {
					return true
				}
			}
			return c.goAway
		})
	}
	if c.goAway {
		c.drain(func() bool { return false })
	}
	return &c.obs
}

// h2Get is one GET by net/http's client over h2c on a fresh connection,
// for "does the server still serve".
func h2Get(addr, path string) (int, string, error) {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), h2Hang)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	r, err := tr.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if r.ProtoMajor != 2 {
		return r.StatusCode, string(b), fmt.Errorf("answered over HTTP/%d.%d", r.ProtoMajor, r.ProtoMinor)
	}
	return r.StatusCode, string(b), err
}

// h2CorpusStreams is the corpus server's SETTINGS_MAX_CONCURRENT_STREAMS:
// small, so that a case can exceed it.
const h2CorpusStreams = 4

// h2Case is one frame sequence. run writes it (and may wait for the
// server between frames); want are lines net/http's observation must
// hold, so each case is known to reach the behaviour it is named for.
type h2Case struct {
	name string
	run  func(c *h2Client)
	want []string
}

// headersSplit sends a header block as HEADERS and CONTINUATION frames of
// at most n bytes each.
func (c *h2Client) headersSplit(id uint32, end bool, n int, fields ...string) {
	c.opening(id)
	c.nextID = max(c.nextID, id+2)
	b := c.block(fields...)
	first := b[:min(n, len(b))]
	b = b[len(first):]
	c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(b) == 0}))
	for len(b) > 0 {
		part := b[:min(n, len(b))]
		b = b[len(part):]
		c.check(c.fr.WriteContinuation(id, len(b) == 0, part))
	}
}

// h2Literal is a header field as an HPACK literal without Huffman coding,
// so that its size on the wire is known.
func h2Literal(name, value string) []byte {
	b := []byte{0}
	for _, s := range []string{name, value} {
		b = h2PrefixInt(b, 7, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// h2PrefixInt appends v as an HPACK integer with an n-bit prefix (RFC 7541 5.1).
func h2PrefixInt(b []byte, n uint, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, byte(v))
	}
	b = append(b, byte(limit))
	for v -= limit; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f|0x80))
	}
	return append(b, byte(v))
}

func h2U32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

var h2Corpus = []h2Case{
	// Valid requests.
	{"get", func(c *h2Client) { c.open("GET", "/", true) },
		[]string{"stream 1: HEADERS {:status: 200; content-length: 3; content-type: text/plain; charset=utf-8}", `stream 1: DATA "ok\n"`}},
	{"get echo query", func(c *h2Client) { c.open("GET", "/echo?a=1&b=%20", true, "x-test", "v") },
		[]string{`GET /echo?a=1&b=%20 host=\"surge\"`}},
	{"head", func(c *h2Client) { c.open("HEAD", "/echo", true) }, []string{"stream 1: END_STREAM"}},
	{"post", func(c *h2Client) {
		id := c.open("POST", "/echo", false, "content-type", "application/json")
		c.data(id, true, `{"areaId":"0"}`)
	}, []string{`body=\"{\\\"areaId\\\":\\\"0\\\"}\"`}},
	{"post split body", func(c *h2Client) {
		id := c.open("POST", "/echo", false, "content-length", "9")
		c.data(id, false, "abc")
		c.data(id, false, "")
		c.data(id, false, "def")
		c.data(id, true, "ghi")
	}, []string{`length=9`, `body=\"abcdefghi\"`}},
	{"post body on headers end", func(c *h2Client) { c.open("POST", "/echo", true) }, []string{"length=0"}},
	{"padded data", func(c *h2Client) {
		id := c.open("POST", "/echo", false)
		c.check(c.fr.WriteDataPadded(id, true, []byte("padded"), make([]byte, 20)))
	}, []string{`body=\"padded\"`}},
	{"padded headers with priority", func(c *h2Client) {
		c.opening(1)
		c.nextID = 3
		c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block(h2Req("GET", "/echo")...),
			EndStream: true, EndHeaders: true, PadLength: 7, Priority: http2.PriorityParam{Weight: 200}}))
	}, []string{"stream 1: HEADERS {:status: 200"}},
	{"continuation", func(c *h2Client) {
		c.headersSplit(1, true, 5, h2Req("GET", "/echo", "x-test", strings.Repeat("c", 40))...)
	}, []string{"x=[\\\"" + strings.Repeat("c", 40)}},
	{"cookie crumbs", func(c *h2Client) { c.open("GET", "/echo", true, "cookie", "a=1", "cookie", "b=2") },
		[]string{`cookie=[\"a=1; b=2\"]`}},
	{"client trailers", func(c *h2Client) {
		id := c.open("POST", "/echo", false, "trailer", "x-check")
		c.data(id, false, "body")
		c.headers(id, true, "x-check", "sum")
	}, []string{`trailer=[X-Check=sum]`}},
	{"trailers without END_STREAM", func(c *h2Client) {
		id := c.open("POST", "/echo", false)
		c.data(id, false, "body")
		c.headers(id, false, "x-check", "sum")
	}, []string{"stream 1: RST_STREAM PROTOCOL_ERROR"}},
	{"flushed answer", func(c *h2Client) { c.open("GET", "/flush", true) }, []string{`DATA "one two three\n"`}},
	{"answer trailers", func(c *h2Client) { c.open("GET", "/trailers", true) }, []string{"HEADERS {x-sum: 42}"}},
	{"two streams", func(c *h2Client) {
		c.open("GET", "/echo?n=1", true)
		c.open("POST", "/echo?n=2", false)
		c.data(3, true, "second")
	}, []string{"stream 1: END_STREAM", "stream 3: END_STREAM"}},
	{"client cancels a waiting stream", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.rst(id, http2.ErrCodeCancel)
		c.open("GET", "/", true)
	}, []string{`stream 3: DATA "ok\n"`}},
	{"te trailers", func(c *h2Client) { c.open("GET", "/echo", true, "te", "trailers") }, []string{`te=[\"trailers\"]`}},

	// Malformed requests (RFC 9113 8.1.1, 8.2, 8.3).
	{"no :method", func(c *h2Client) { c.headers(1, true, ":scheme", "http", ":authority", "surge", ":path", "/") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"no :path", func(c *h2Client) { c.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "surge") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"empty :path", func(c *h2Client) { c.open("GET", "", true) }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"unknown pseudo-header", func(c *h2Client) { c.open("GET", "/", true, ":foo", "bar") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"response pseudo-header", func(c *h2Client) { c.open("GET", "/", true, ":status", "200") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"pseudo-header after a field", func(c *h2Client) {
		c.headers(1, true, ":method", "GET", ":scheme", "http", "x-test", "a", ":path", "/", ":authority", "surge")
	}, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"duplicate :path", func(c *h2Client) { c.open("GET", "/", true, ":path", "/again") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"uppercase field name", func(c *h2Client) { c.open("GET", "/", true, "X-Test", "a") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	{"field value with CR", func(c *h2Client) { c.open("GET", "/", true, "x-test", "a\rb") }, []string{"RST_STREAM PROTOCOL_ERROR"}},
	// net/http answers 400 to connection-specific fields (RFC 9113 8.2.2
	// makes them malformed: a stream error).
	{"connection field", func(c *h2Client) { c.open("GET", "/", true, "connection", "keep-alive") }, []string{"stream 1: HEADERS {:status: 400"}},
	{"te gzip", func(c *h2Client) { c.open("GET", "/", true, "te", "gzip") }, []string{"stream 1: HEADERS {:status: 400"}},
	{"transfer-encoding", func(c *h2Client) { c.open("POST", "/", false, "transfer-encoding", "chunked") },
		[]string{"stream 1: HEADERS {:status: 400", "stream 1: RST_STREAM NO_ERROR"}},
	{"body longer than content-length", func(c *h2Client) {
		id := c.open("POST", "/echo", false, "content-length", "3")
		c.data(id, true, "abcdef")
	}, []string{"stream 1: RST_STREAM PROTOCOL_ERROR"}},
	{"body shorter than content-length", func(c *h2Client) {
		id := c.open("POST", "/echo", false, "content-length", "10")
		c.data(id, true, "abc")
	}, []string{"declared a Content-Length of 10 but only wrote 3 bytes"}},
	{"header list over MaxHeaderBytes", func(c *h2Client) {
		fields := h2Req("GET", "/echo")
		for i := range 2 * api.MaxHeaderBytes / 1024 {
			fields = append(fields, fmt.Sprintf("x-f-%d", i), strings.Repeat("h", 1024))
		}
		c.headersSplit(1, true, int(c.maxFrame), fields...)
	}, []string{"stream 1: HEADERS {:status: 431"}},
	// One field longer than the whole list may be is refused while
	// decoding it: net/http ends the connection.
	{"one field over MaxHeaderBytes", func(c *h2Client) {
		c.headersSplit(1, true, int(c.maxFrame), h2Req("GET", "/echo", "x-test", strings.Repeat("h", 2*api.MaxHeaderBytes))...)
	}, []string{"COMPRESSION_ERROR"}},

	// Stream states (RFC 9113 5.1).
	{"DATA on a closed stream", func(c *h2Client) {
		id := c.open("GET", "/", true)
		c.await(id)
		c.data(id, true, "late")
	}, []string{"STREAM_CLOSED"}},
	{"DATA after END_STREAM", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.data(id, true, "late")
	}, []string{"stream 1: RST_STREAM STREAM_CLOSED"}},
	{"DATA on an idle stream", func(c *h2Client) { c.data(1, true, "x") }, []string{"GOAWAY", "PROTOCOL_ERROR"}},
	{"DATA on stream 0", func(c *h2Client) { c.data(0, true, "x") }, []string{"GOAWAY", "PROTOCOL_ERROR"}},
	{"HEADERS on an even stream", func(c *h2Client) { c.headers(2, true, h2Req("GET", "/")...); delete(c.opened, 2) },
		[]string{"GOAWAY", "PROTOCOL_ERROR"}},
	{"stream id going backwards", func(c *h2Client) {
		// Stream 5 waits, so its answer cannot race the GOAWAY.
		c.headers(5, true, h2Req("GET", "/sleep")...)
		c.headers(3, true, h2Req("GET", "/")...)
	}, []string{"GOAWAY PROTOCOL_ERROR"}},
	{"RST_STREAM on an idle stream", func(c *h2Client) { c.raw(http2.FrameRSTStream, 0, 1, h2U32(uint32(http2.ErrCodeCancel))) },
		[]string{"GOAWAY", "PROTOCOL_ERROR"}},
	{"RST_STREAM of 3 bytes", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.raw(http2.FrameRSTStream, 0, id, []byte{0, 0, 8})
	}, []string{"FRAME_SIZE_ERROR"}},
	// Handlers that outlive their reset stream fill every slot, so the
	// resets that follow pile up (CVE-2023-44487).
	{"rapid reset burst", func(c *h2Client) {
		for range 100 {
			c.rst(c.open("GET", "/stuck", true), http2.ErrCodeCancel)
		}
		c.open("GET", "/", true)
	}, []string{"GOAWAY", "ENHANCE_YOUR_CALM", "end: closed"}},
	{"a few resets", func(c *h2Client) {
		for range 3 {
			c.rst(c.open("GET", "/sleep", true), http2.ErrCodeCancel)
		}
		c.open("GET", "/", true)
	}, []string{`stream 7: DATA "ok\n"`}},
	{"over MAX_CONCURRENT_STREAMS", func(c *h2Client) {
		var ids []uint32
		for range h2CorpusStreams {
			ids = append(ids, c.open("GET", "/sleep", true))
		}
		over := c.open("GET", "/sleep", true)
		c.await(over)
		for _, id := range ids {
			c.rst(id, http2.ErrCodeCancel)
		}
	}, []string{"stream 9: RST_STREAM"}},
	{"PRIORITY on itself", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.check(c.fr.WritePriority(id, http2.PriorityParam{StreamDep: id, Weight: 1}))
	}, []string{"stream 1: RST_STREAM PROTOCOL_ERROR"}},
	{"PRIORITY on an idle stream", func(c *h2Client) {
		c.check(c.fr.WritePriority(7, http2.PriorityParam{StreamDep: 0, Weight: 1}))
		c.open("GET", "/", true)
	}, []string{"stream 1: END_STREAM"}},

	// Flow control and settings (RFC 9113 6.5, 6.9).
	{"WINDOW_UPDATE 0 on the connection", func(c *h2Client) { c.check(c.fr.WriteWindowUpdate(0, 0)) }, []string{"GOAWAY", "PROTOCOL_ERROR"}},
	{"WINDOW_UPDATE 0 on a stream", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.check(c.fr.WriteWindowUpdate(id, 0))
	}, []string{"stream 1: RST_STREAM PROTOCOL_ERROR"}},
	{"connection window overflow", func(c *h2Client) {
		c.check(c.fr.WriteWindowUpdate(0, 1<<31-1))
		c.check(c.fr.WriteWindowUpdate(0, 1<<31-1))
	}, []string{"FLOW_CONTROL_ERROR"}},
	{"stream window overflow", func(c *h2Client) {
		id := c.open("GET", "/sleep", true)
		c.check(c.fr.WriteWindowUpdate(id, 1<<31-1))
	}, []string{"stream 1: RST_STREAM FLOW_CONTROL_ERROR"}},
	{"SETTINGS ENABLE_PUSH 2", func(c *h2Client) { c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 2})) },
		[]string{"PROTOCOL_ERROR"}},
	{"SETTINGS INITIAL_WINDOW_SIZE 2^31", func(c *h2Client) {
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}))
	}, []string{"FLOW_CONTROL_ERROR"}},
	{"SETTINGS MAX_FRAME_SIZE too small", func(c *h2Client) {
		c.check(c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1000}))
	}, []string{"PROTOCOL_ERROR"}},
	{"SETTINGS of 5 bytes", func(c *h2Client) { c.raw(http2.FrameSettings, 0, 0, []byte{0, 3, 0, 0, 0}) }, []string{"FRAME_SIZE_ERROR"}},
	{"SETTINGS ACK with a payload", func(c *h2Client) { c.raw(http2.FrameSettings, http2.FlagSettingsAck, 0, make([]byte, 6)) },
		[]string{"FRAME_SIZE_ERROR"}},
	{"SETTINGS on a stream", func(c *h2Client) { c.raw(http2.FrameSettings, 0, 1, nil) }, []string{"PROTOCOL_ERROR"}},
	{"SETTINGS unknown id", func(c *h2Client) {
		c.check(c.fr.WriteSettings(http2.Setting{ID: 0x99, Val: 7}))
		c.open("GET", "/", true)
	}, []string{"stream 1: END_STREAM"}},
	{"a window of 16 bytes", func(c *h2Client) {
		c.settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 16})
		c.awaitSettingsAcks(2)
		id := c.open("GET", "/big?n=100", true)
		c.awaitData(id, 16)
		c.windowUpdate(id, 50)
		c.awaitData(id, 66)
		c.windowUpdate(id, 34)
	}, []string{`stream 1: DATA "` + strings.Repeat("x", 100) + `"`, "stream 1: END_STREAM"}},
	{"PING", func(c *h2Client) { c.ping("12345678") }, []string{"PING ACK (echo)"}},
	{"PING of 7 bytes", func(c *h2Client) { c.raw(http2.FramePing, 0, 0, make([]byte, 7)) }, []string{"FRAME_SIZE_ERROR"}},
	{"PING on a stream", func(c *h2Client) { c.raw(http2.FramePing, 0, 1, make([]byte, 8)) }, []string{"PROTOCOL_ERROR"}},

	// Frame layer (RFC 9113 4.2, 5.5, 6.10).
	{"DATA over MAX_FRAME_SIZE", func(c *h2Client) {
		id := c.open("POST", "/echo", false)
		c.raw(http2.FrameData, http2.FlagDataEndStream, id, make([]byte, c.maxFrame+1))
	}, []string{"FRAME_SIZE_ERROR"}},
	{"HEADERS over MAX_FRAME_SIZE", func(c *h2Client) {
		b := append(c.block(h2Req("GET", "/")...), h2Literal("x-test", strings.Repeat("f", int(c.maxFrame)))...)
		c.raw(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 1, b)
	}, []string{"FRAME_SIZE_ERROR"}},
	{"unknown frame types", func(c *h2Client) {
		c.raw(0xfa, 0xff, 0, []byte("ignored"))
		c.raw(0xfb, 0, 1, []byte("ignored"))
		c.open("GET", "/", true)
	}, []string{"stream 1: END_STREAM"}},
	{"unknown frame inside a header block", func(c *h2Client) {
		b := c.block(h2Req("GET", "/")...)
		c.check(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2], EndStream: true}))
		c.raw(0xfa, 0, 1, nil)
		c.check(c.fr.WriteContinuation(1, true, b[2:]))
	}, []string{"PROTOCOL_ERROR"}},
	{"CONTINUATION without HEADERS", func(c *h2Client) { c.check(c.fr.WriteContinuation(1, true, c.block(h2Req("GET", "/")...))) },
		[]string{"PROTOCOL_ERROR"}},
	{"bad HPACK", func(c *h2Client) {
		c.raw(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream, 1, []byte{0xff, 0xff, 0xff, 0xff})
	}, []string{"COMPRESSION_ERROR"}},
	{"GOAWAY from the client mid-stream", func(c *h2Client) {
		id := c.open("POST", "/echo", false)
		c.check(c.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
		c.data(id, true, "after goaway")
	}, []string{`body=\"after goaway\"`, "GOAWAY", "end: closed"}},
}

// TestH2FramesDifferential sends every frame sequence of the corpus to
// net/http's HTTP/2 server and to the lean one, each on a fresh
// connection, and requires the same observation from both: the frames
// received per stream and on the connection, normalised for what may
// differ (h2Client.apply), and whether the connection ended.
func TestH2FramesDifferential(t *testing.T) {
	lim := api.Limits{MaxStreams: h2CorpusStreams}
	addrs := map[bool]string{}
	for _, m := range h2Modes {
		addrs[m.lean] = h2Serve(t, m.lean, lim)
	}
	for _, cs := range h2Corpus {
		t.Run(cs.name, func(t *testing.T) {
			// A connection error's GOAWAY comes a second before the close.
			t.Parallel()
			var obs [2]string
			for i, m := range h2Modes {
				c := h2Dial(t, addrs[m.lean])
				cs.run(c)
				obs[i] = c.finish().String()
			}
			h2SameAnswers(t, obs, cs.want)
		})
	}
}

// Floods and slow clients: a client that sends and does not read, or
// reads and does not send, must not hold the server's memory or a
// connection beyond the limits. Each test asks both servers and requires
// the lean one to end as net/http's does.

// h2FloodFrames is how many frames a flood sends at most: twice what
// the server's socket may buffer of their answers (Linux grows a send
// buffer up to tcp_wmem's maximum, 4 MiB by default) plus what net/http
// queues unanswered (10,000 control frames), so that the answers cannot
// all leave however fast the server reads. h2SmallRcvBuf keeps the
// client's side of the buffering small. answer is the size of the frame
// that answers one of the flood's: a PING ack is 17 bytes, a SETTINGS ack
// 9, so a SETTINGS flood sized for PINGs fitted its acks in the buffer.
func h2FloodFrames(answer int) int {
	const queued, defaultMax = 10_000, 4 << 20
	wmax := defaultMax
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			wmax = cmp.Or(atoiOr(f[2], 0), defaultMax)
		}
	}
	return 2 * (wmax/answer + queued)
}

// h2AckSize is the size of the ack of frame, a PING or a SETTINGS: the
// frame header and, for a PING, its 8 bytes echoed.
func h2AckSize(frame []byte) int {
	if http2.FrameType(frame[3]) == http2.FramePing {
		return 17
	}
	return 9
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// h2FloodHang bounds a whole flood, sent and answered: far longer than a
// flood takes, even under the race detector on a busy machine.
const h2FloodHang = 2 * time.Minute

// h2FloodStall is how long one write of the flood may wait before the
// server counts as having stopped reading.
const h2FloodStall = 30 * time.Second

// h2SmallRcvBuf is the client's receive buffer in the flood and slow
// reader tests, so that what the server writes piles up on its side.
const h2SmallRcvBuf = 4096

// h2DialSmall connects with a small receive buffer, set before the
// handshake so that the window the client advertises stays small.
func h2DialSmall(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	d := net.Dialer{Timeout: h2Hang, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, h2SmallRcvBuf)
		})
		return cmp.Or(err, serr)
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// h2Flood writes the preface, SETTINGS, then frame over and over without
// reading, until the server stops taking them or h2FloodFrames were sent,
// and a last PING; then it reads until that PING's ACK, which the server
// writes after every answer to the flood, or the connection's end. It
// reports whether the server closed the connection and how many frames
// it answered. A server that stops reading for h2FloodStall without
// closing stalled: it holds no more of the flood, but never answers the
// last PING. Only the reference server (net/http's) may, and does on a
// loaded host now and then; the test then fails unless reference.
func h2Flood(t *testing.T, addr string, frame []byte, reference bool) (closed bool, sent, answered int) {
	conn := h2DialSmall(t, addr)
	conn.SetReadDeadline(time.Now().Add(h2FloodHang))
	stalled := func(err error) bool {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return false
		}
		if !reference {
			t.Fatalf("the server neither answered the PING after the flood nor closed (answered %d of %d)", answered, sent)
		}
		t.Logf("the reference server stalled: it stopped reading the flood without closing (answered %d of %d)", answered, sent)
		return true
	}
	write := func(b []byte) error {
		conn.SetWriteDeadline(time.Now().Add(h2FloodStall))
		_, err := conn.Write(b)
		return err
	}
	if err := write([]byte(h2Preface + "\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		t.Fatal(err)
	}
	const batch = 1000
	chunk := bytes.Repeat(frame, batch)
	for n := h2FloodFrames(h2AckSize(frame)); sent < n; {
		if err := write(chunk); err != nil {
			if stalled(err) {
				return false, sent, answered
			}
			break
		}
		sent += batch
	}
	last := [8]byte{'l', 'a', 's', 't'}
	var ping bytes.Buffer
	http2.NewFramer(&ping, nil).WritePing(false, last)
	if err := write(ping.Bytes()); err != nil && stalled(err) {
		return false, sent, answered
	}
	fr := http2.NewFramer(nil, conn)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if stalled(err) {
				return false, sent, answered
			}
			return true, sent, answered
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if f.IsAck() && f.Data == last {
				return false, sent, answered
			}
			answered += h2Count(f.IsAck())
		case *http2.SettingsFrame:
			answered += h2Count(f.IsAck())
		}
	}
}

func h2Count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestH2PingAndSettingsFloods: a client that sends PINGs or SETTINGS, each
// owing an ACK, and reads none, would make the server queue answers it
// cannot write. The server must bound them: net/http closes the
// connection once 10,000 control frames wait (PING), or answers a run of
// SETTINGS with one ACK and keeps the connection (SETTINGS, against RFC
// 9113 6.5.3's one ACK each). The lean server must answer fewer frames
// than it was sent, and close the connection where net/http does.
func TestH2PingAndSettingsFloods(t *testing.T) {
	ping := []byte{0, 0, 8, byte(http2.FramePing), 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	settings := []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}
	for _, fl := range []struct {
		name  string
		frame []byte
	}{{"PING", ping}, {"SETTINGS", settings}} {
		t.Run(fl.name, func(t *testing.T) {
			var closed [2]bool
			for i, m := range h2Modes {
				var sent, answered int
				closed[i], sent, answered = h2Flood(t, h2Serve(t, m.lean, api.Limits{}), fl.frame, !m.lean)
				t.Logf("%s server: sent %d %s frames, %d answered, closed %v", m.name, sent, fl.name, answered, closed[i])
				if !closed[i] && answered >= sent {
					t.Errorf("%s server answered all %d frames of a flood never read and kept the connection: nothing bounds its queue", m.name, sent)
				}
			}
			if closed[0] && !closed[1] {
				t.Errorf("net/http's server closes a connection that floods %s; the lean one keeps it", fl.name)
			}
		})
	}
}

// h2SlowTimeout is the write and read timeout of the slow-client tests:
// short, so they wait little; the tests assert what ends, not when.
const h2SlowTimeout = 200 * time.Millisecond

// h2SlowWait is how long the reader that never reads stays silent: many
// write timeouts, so the server has given up on the answer by then.
const h2SlowWait = 15 * h2SlowTimeout

// h2BigAnswer is the answer the slow reader never reads: far more than
// the sockets' buffers hold.
const h2BigAnswer = 64 << 20

// TestH2ReaderThatNeverReads: a client opens a large answer with a large
// window and reads nothing. The write timeout must cut the answer: when
// the client reads at last, the stream does not end with the answer
// complete. (net/http resets the stream and keeps the connection, but its
// writer stays blocked on the socket until the client reads; the lean
// server may close the connection instead.)
func TestH2ReaderThatNeverReads(t *testing.T) {
	for _, m := range h2Modes {
		addr := h2Serve(t, m.lean, api.Limits{WriteTimeout: h2SlowTimeout})
		conn := h2DialSmall(t, addr)
		c := newH2Client(t, conn)
		c.conn = conn
		if _, err := io.WriteString(conn, h2Preface); err != nil {
			t.Fatal(err)
		}
		c.settings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window})
		c.windowUpdate(0, h2Window)
		id := c.open("GET", fmt.Sprintf("/big?n=%d", h2BigAnswer), true)
		time.Sleep(h2SlowWait)
		c.events = make(chan h2Event, 64)
		go c.read()
		c.await(id)
		got := c.obs.stream(id)
		got.flush()
		t.Logf("%s server: %v; connection closed: %v", m.name, got.items, c.closed)
		if slices.Contains(got.items, "END_STREAM") && got.total == h2BigAnswer {
			t.Errorf("%s server: the answer a client never read was sent whole, past the write timeout", m.name)
		}
		if !c.ended[id] && !c.closed {
			t.Errorf("%s server: the stream of the answer never read neither ended nor was cut", m.name)
		}
	}
}

// TestH2StreamsThatNeverEnd: a client opens as many streams as it may,
// each a request whose body never ends. The read timeout must end every
// one, and the connection must then serve a new request: streams that
// hang do not hold their slots.
func TestH2StreamsThatNeverEnd(t *testing.T) {
	var obs [2]string
	for i, m := range h2Modes {
		addr := h2Serve(t, m.lean, api.Limits{MaxStreams: h2CorpusStreams, ReadTimeout: h2SlowTimeout})
		c := h2Dial(t, addr)
		var ids []uint32
		for range h2CorpusStreams {
			id := c.open("POST", "/", false)
			c.data(id, false, "part of a body")
			ids = append(ids, id)
		}
		c.await(ids...)
		var out []string
		for _, id := range ids {
			out = append(out, fmt.Sprintf("stream %d ended by the server: %v", id, c.ended[id]))
		}
		if !c.closed {
			id := c.open("GET", "/", true)
			c.await(id)
			out = append(out, fmt.Sprintf("then served: %q", c.obs.stream(id).items))
		}
		obs[i] = strings.Join(out, "\n") + "\nclosed: " + fmt.Sprint(c.closed)
		t.Logf("%s server:\n%s", m.name, obs[i])
	}
	if !strings.Contains(obs[0], "then served") {
		t.Errorf("net/http's server did not serve a new stream after the timed-out ones:\n%s", obs[0])
	}
	if obs[0] != obs[1] {
		t.Errorf("net/http's server:\n%s\nthe lean one:\n%s", obs[0], obs[1])
	}
}

// h2WaitLimits leave one in-flight slot and room for one request to wait
// for it: the waiting room (Limits.MaxInflight, WaitingRoom) the lean
// server must keep as net/http's handlers meet it.
var h2WaitLimits = api.Limits{MaxStreams: h2CorpusStreams, MaxInflight: 1, WaitingRoom: 1}

// h2RetryAfter matches the predicted wait a 503 names (its header, its
// message, and so its length), which depends on the rates measured so far.
var h2RetryAfter = regexp.MustCompile(`(?i)(retry-after: |retry after |content-length: )[0-9]+`)

// h2WaitCorpus are sequences that meet the waiting room. In each, stream
// 1 holds the only slot (/hold sends its head, then waits) before the
// others are sent.
var h2WaitCorpus = []h2Case{
	{"a waiter is served when the slot frees", func(c *h2Client) {
		hold := c.open("GET", "/hold", true)
		c.awaitHeaders(hold)
		c.open("GET", "/", true)
		c.rst(hold, http2.ErrCodeCancel)
	}, []string{`DATA "ok\n"`}},
	{"a waiter the client cancels", func(c *h2Client) {
		hold := c.open("GET", "/hold", true)
		c.awaitHeaders(hold)
		waiter := c.open("GET", "/", true)
		c.awaitWaiting(1)
		c.rst(waiter, http2.ErrCodeCancel)
		c.awaitWaiting(0) // else the next request may find the room still full
		c.rst(hold, http2.ErrCodeCancel)
		c.open("GET", "/", true)
	}, []string{`DATA "ok\n"`}},
	{"the room full", func(c *h2Client) {
		hold := c.open("GET", "/hold", true)
		c.awaitHeaders(hold)
		a, b := c.open("GET", "/", true), c.open("GET", "/", true)
		c.drain(func() bool { return c.ended[a] || c.ended[b] })
		c.rst(hold, http2.ErrCodeCancel)
	}, []string{"HEADERS {:status: 503", "retry-after: N", `DATA "ok\n"`}},
	{"GOAWAY from the client while a request waits", func(c *h2Client) {
		hold := c.open("GET", "/hold", true)
		c.awaitHeaders(hold)
		c.open("GET", "/", true)
		c.check(c.fr.WriteGoAway(0, http2.ErrCodeNo, nil))
		c.rst(hold, http2.ErrCodeCancel)
	}, []string{"GOAWAY last=3 NO_ERROR", `DATA "ok\n"`}},
}

// TestH2WaitingRoomDifferential sends h2WaitCorpus to both servers, each
// with one in-flight slot, and requires the same observation, streams
// compared without their ids.
func TestH2WaitingRoomDifferential(t *testing.T) {
	for _, cs := range h2WaitCorpus {
		t.Run(cs.name, func(t *testing.T) {
			var obs [2]string
			for i, m := range h2Modes {
				// A server each: a waiter left by one case must not
				// hold the slot of the next.
				c := h2Dial(t, h2Serve(t, m.lean, h2WaitLimits))
				cs.run(c)
				obs[i] = h2RetryAfter.ReplaceAllString(c.finish().unordered(), "${1}N")
			}
			h2SameAnswers(t, obs, cs.want)
		})
	}
}
