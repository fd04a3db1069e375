// The ticketing generator reproduces the peer's flash-sale spike test
// (docs/BENCHMARKS.md) for the compatibility flow (POST then GET) and the
// native one-round-trip flow, and checks the answers for double booking.

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/surge-run/surge/internal/clientconn"
	"github.com/surge-run/surge/internal/ids"
)

// Flows the generator can drive.
const (
	FlowCompat = "compat" // POST /v1/event/{id}/reservation, then GET /v1/reservation/{id}
	FlowNative = "native" // POST /v2/reservations, result in the reply
)

// The peer's event shape: every area is a 20 x 20 grid.
const (
	gridRows = 20
	gridCols = 20
	maxSeats = 4 // numOfSeats is uniform in 1..maxSeats
)

const (
	// maxRetries matches the peer's client: a request is retried this many
	// times after a transport error, a 5xx or a 429 before it counts as an
	// error.
	maxRetries = 20
	// maxReplyBytes bounds what the generator reads of one reply; a
	// reservation is a few hundred bytes.
	maxReplyBytes = 1 << 20
	// responseHeaderTimeout bounds a long-poll GET and a stuck server; it
	// surfaces as a transport error and is retried.
	responseHeaderTimeout = 60 * time.Second
	// maxSamples bounds the messages kept to explain errors and invalid
	// replies; the counters hold the totals.
	maxSamples = 5
	// maxLatencyUs is the HDR histogram's highest trackable value;
	// anything slower is recorded as this.
	maxLatencyUs = 600_000_000
)

// GenConfig says what one spike sends and where.
type GenConfig struct {
	BaseURL string // scheme://host:port of the server
	// Nodes, if set, are the base URLs of a cluster's nodes: each HTTP
	// client sticks to one of them, round-robin over the clients (as a load
	// balancer spreads connections), and BaseURL only creates the events.
	Nodes        []string
	Flow         string // FlowCompat or FlowNative
	Areas        int    // areas per event, each gridRows x gridCols seats
	Reservations int    // reservations per group
	Clients      int    // HTTP clients per group, each with its own transport
	Groups       int    // generator groups, each with its own event
	Inflight     int    // reservations in flight at once, across all groups
	HTTP2        bool   // h2c with prior knowledge (or h2 over TLS); HTTP/1.1 otherwise
	Seed         uint64 // seeds every worker's area and seat-count choices
	// Conn is --ca-file and --token, for an https:// server or a token.
	Conn clientconn.Options
	// CheckSeats turns on the correctness checks (seat shapes, echoed area,
	// double booking). The null server's fixed replies would fail them.
	CheckSeats bool

	// Timeline, if set, samples the spike per second for the charts.
	Timeline *Timeline

	Label       string    // names the run in progress lines
	Progress    io.Writer // progress lines go here; nil for none
	ProgressTTY bool      // redraw one line with \r instead of printing lines
}

func (c *GenConfig) validate() error {
	switch {
	case c.Flow != FlowCompat && c.Flow != FlowNative:
		return fmt.Errorf("flow %q: want %s or %s", c.Flow, FlowCompat, FlowNative)
	case c.Areas < 1 || c.Areas >= maxAreas:
		return fmt.Errorf("areas %d: want 1..%d", c.Areas, maxAreas-1)
	case c.Reservations < 1:
		return fmt.Errorf("reservations %d: want at least 1", c.Reservations)
	case c.Clients < 1:
		return fmt.Errorf("clients %d: want at least 1", c.Clients)
	case c.Groups < 1 || c.Groups >= maxGroups:
		return fmt.Errorf("groups %d: want 1..%d", c.Groups, maxGroups-1)
	case c.Inflight < c.Groups:
		return fmt.Errorf("inflight %d: want at least one per group (%d)", c.Inflight, c.Groups)
	}
	for _, b := range append([]string{c.BaseURL}, c.Nodes...) {
		u, err := url.Parse(b)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("target %q: want http://host:port or https://host:port", b)
		}
	}
	return nil
}

// nodeForClient is the node that client c of group g sends to: the
// clients of all groups are dealt to the nodes in turn, so n clients cover
// min(n, nodes) nodes and no node gets two more than another.
func nodeForClient(g, c, clientsPerGroup, nodes int) int {
	if nodes <= 1 {
		return 0
	}
	return (g*clientsPerGroup + c) % nodes
}

// Stats is what one spike measured.
type Stats struct {
	Reservations int64   `json:"reservations"`
	Successes    int64   `json:"successes"`
	Failures     int64   `json:"failures"`
	Errors       int64   `json:"errors"`
	Invalid      int64   `json:"invalid"` // RESERVED replies whose seats break the RANDOM contract
	Retries      int64   `json:"retries"`
	Seconds      float64 `json:"completionSeconds"`
	PerSecond    float64 `json:"reservationsPerSecond"`
	P50Us        int64   `json:"p50Us"`
	P95Us        int64   `json:"p95Us"`
	P99Us        int64   `json:"p99Us"`
	MaxUs        int64   `json:"maxUs"`
	SeatsSold    int64   `json:"seatsSold"`
	SeatsOffered int64   `json:"seatsOffered"`
	// GeneratorCPUSeconds is the bench process's own user+system CPU during
	// the spike: if it nears the cores available, the generator is the
	// bottleneck.
	GeneratorCPUSeconds float64 `json:"generatorCpuSeconds"`
	// PerNode counts the reservations sent through each of GenConfig.Nodes
	// (where the client's connection went, not which node owned the
	// partition); nil without Nodes.
	PerNode        []int64         `json:"reservationsPerNode,omitempty"`
	DoubleBookings []DoubleBooking `json:"doubleBookings"`
	ErrorSamples   []string        `json:"errorSamples,omitempty"`
	InvalidSamples []string        `json:"invalidSamples,omitempty"`
}

// Generator drives one spike. Setup creates the events and opens the
// connections; Spike is the measured part.
type Generator struct {
	cfg     GenConfig
	base    *url.URL
	groups  []*genGroup
	workers []*worker

	done atomic.Int64 // reservations finished, for progress
	errs atomic.Int64

	sampleMu       sync.Mutex
	errorSamples   []string
	invalidSamples []string
}

type genGroup struct {
	idx     int
	eventID string
	clients []*http.Client
	// clientBase and clientPost are each client's node: its base URL and
	// reservation URL; clientNode its index in GenConfig.Nodes.
	clientBase []*url.URL
	clientPost []*url.URL
	clientNode []int
	n          int64
	next       atomic.Int64
	// bodyPrefix is the reservation body up to the area id; keyPrefix
	// makes idempotency keys unique per run and group.
	bodyPrefix []byte
	keyPrefix  []byte
}

// NewGenerator checks cfg and builds the clients and workers.
func NewGenerator(cfg GenConfig) (*Generator, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	base, _ := url.Parse(cfg.BaseURL)
	// JoinPath keeps a relative path relative; requests need it absolute.
	base.Path = strings.TrimRight(base.Path, "/") + "/"
	g := &Generator{cfg: cfg, base: base}
	seq := 0
	for gi := range cfg.Groups {
		workers := cfg.Inflight / cfg.Groups
		if gi < cfg.Inflight%cfg.Groups {
			workers++
		}
		gr := &genGroup{idx: gi, eventID: "event-" + ids.New().String(), n: int64(cfg.Reservations)}
		gr.bodyPrefix = fmt.Appendf(nil, `{"userId":"user123","eventId":%q,"areaId":"`, gr.eventID)
		gr.keyPrefix = fmt.Appendf(nil, "%s-", gr.eventID)
		for ci := range cfg.Clients {
			gr.clients = append(gr.clients, newHTTPClient(cfg.HTTP2, cfg.Inflight, cfg.Conn))
			cb, node := base, 0
			if len(cfg.Nodes) > 0 {
				node = nodeForClient(gi, ci, cfg.Clients, len(cfg.Nodes))
				cb, _ = url.Parse(cfg.Nodes[node])
				cb.Path = strings.TrimRight(cb.Path, "/") + "/"
			}
			post := cb.JoinPath("v2", "reservations")
			if cfg.Flow == FlowCompat {
				post = cb.JoinPath("v1", "event", gr.eventID, "reservation")
			}
			gr.clientBase = append(gr.clientBase, cb)
			gr.clientPost = append(gr.clientPost, post)
			gr.clientNode = append(gr.clientNode, node)
		}
		g.groups = append(g.groups, gr)
		perWorker := cfg.Reservations/workers + 1
		for wi := range workers {
			g.workers = append(g.workers, newWorker(g, gr, wi%cfg.Clients, seq, perWorker))
			seq++
		}
	}
	return g, nil
}

// newHTTPClient keeps up to idleConns connections open between requests,
// so HTTP/1.1 never closes one that the next reservation would reopen.
func newHTTPClient(h2 bool, idleConns int, conn clientconn.Options) *http.Client {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   idleConns,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: responseHeaderTimeout,
	}
	// No Client.Timeout: it would arm a timer per request, and
	// ResponseHeaderTimeout plus the run's context already bound a request.
	return &http.Client{Transport: connTransport(tr, h2, conn)}
}

// Close releases the generator's connections.
func (g *Generator) Close() {
	for _, gr := range g.groups {
		for _, c := range gr.clients {
			c.CloseIdleConnections()
		}
	}
}

// Setup creates each group's event and opens every worker's connection, so
// the spike measures reservations only.
func (g *Generator) Setup(ctx context.Context) error {
	for _, gr := range g.groups {
		if err := g.createEvent(ctx, gr); err != nil {
			return fmt.Errorf("create event %s: %w", gr.eventID, err)
		}
	}
	// One concurrent health check per worker: with HTTP/1.1 this opens as
	// many connections as the spike will use, with h2c one per client.
	errc := make(chan error, len(g.workers))
	for _, w := range g.workers {
		go func() {
			health := w.base.JoinPath("v1", "health_check")
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, health.String(), nil)
			if err == nil {
				_, err = w.do(req, nil)
			}
			if err == nil && w.status != http.StatusOK {
				err = fmt.Errorf("health check: status %d", w.status)
			}
			errc <- err
		}()
	}
	var first error
	for range g.workers {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	for _, w := range g.workers {
		w.retries = 0
	}
	return first
}

func (g *Generator) createEvent(ctx context.Context, gr *genGroup) error {
	body, err := peerEventBody(gr.eventID, g.cfg.Areas)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.base.JoinPath("v1", "event").String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	w := newWorker(g, gr, 0, 0, 0)
	reply, err := w.do(req, body)
	if err != nil {
		return err
	}
	if w.status != http.StatusOK {
		return fmt.Errorf("status %d: %s", w.status, clip(reply))
	}
	return nil
}

// Spike launches every group's reservations at once, bounded by the
// in-flight limit, and returns when all are answered or ctx is done.
func (g *Generator) Spike(ctx context.Context) (*Stats, error) {
	total := int64(g.cfg.Reservations) * int64(g.cfg.Groups)
	stopProgress := g.startProgress(total)
	cpu0 := selfCPUSeconds()
	start := time.Now()
	g.cfg.Timeline.begin()
	var wg sync.WaitGroup
	for _, w := range g.workers {
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	g.cfg.Timeline.end()
	cpu1 := selfCPUSeconds()
	stopProgress()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return g.collect(elapsed, cpu1-cpu0), nil
}

func (g *Generator) collect(elapsed time.Duration, cpu float64) *Stats {
	s := &Stats{
		Seconds:             elapsed.Seconds(),
		SeatsOffered:        int64(g.cfg.Groups) * int64(g.cfg.Areas) * gridRows * gridCols,
		GeneratorCPUSeconds: cpu,
		DoubleBookings:      []DoubleBooking{},
	}
	h := hdrhistogram.New(1, maxLatencyUs, 3)
	ledgers := make([]*Ledger, 0, len(g.workers))
	if len(g.cfg.Nodes) > 0 {
		s.PerNode = make([]int64, len(g.cfg.Nodes))
	}
	for _, w := range g.workers {
		if s.PerNode != nil {
			s.PerNode[w.node] += w.successes + w.failures + w.errors + w.invalid
		}
		s.Successes += w.successes
		s.Failures += w.failures
		s.Errors += w.errors
		s.Invalid += w.invalid
		s.Retries += w.retries
		s.SeatsSold += w.seatsSold
		for _, us := range w.latUs {
			_ = h.RecordValue(int64(us))
		}
		ledgers = append(ledgers, &w.ledger)
	}
	s.Reservations = s.Successes + s.Failures + s.Errors + s.Invalid
	if elapsed > 0 {
		s.PerSecond = float64(s.Reservations) / elapsed.Seconds()
	}
	s.P50Us, s.P95Us, s.P99Us = h.ValueAtQuantile(50), h.ValueAtQuantile(95), h.ValueAtQuantile(99)
	s.MaxUs = h.Max()
	if g.cfg.CheckSeats {
		s.DoubleBookings = append(s.DoubleBookings, FindDoubleBookings(ledgers...)...)
	}
	s.ErrorSamples, s.InvalidSamples = g.errorSamples, g.invalidSamples
	return s
}

func (g *Generator) sample(dst *[]string, msg string) {
	g.sampleMu.Lock()
	if len(*dst) < maxSamples {
		*dst = append(*dst, msg)
	}
	g.sampleMu.Unlock()
}

func (g *Generator) startProgress(total int64) (stop func()) {
	every := 2 * time.Second
	if g.cfg.ProgressTTY {
		every = 250 * time.Millisecond
	}
	last, lastAt := int64(0), time.Now()
	return progress(g.cfg.Progress, g.cfg.ProgressTTY, every, func() string {
		done, now := g.done.Load(), time.Now()
		rate := float64(done-last) / now.Sub(lastAt).Seconds()
		last, lastAt = done, now
		return fmt.Sprintf("%s  %d/%d  %s/s  errors %d", g.cfg.Label, done, total, grouped(int64(rate)), g.errs.Load())
	})
}

// worker sends one reservation at a time. Everything it needs per request
// (bodies, reply buffer, requests, parsed reply) is allocated once and
// reused, so the generator's cost per reservation is the HTTP client's own.
type worker struct {
	g      *Generator
	gr     *genGroup
	client *http.Client
	base   *url.URL // the client's node
	node   int      // its index in GenConfig.Nodes
	rng    *rand.Rand

	body    []byte
	src     bodySource
	getBody func() (io.ReadCloser, error)
	resp    []byte
	status  int
	reply   reservationReply
	post    *http.Request
	get     *http.Request
	path    []byte
	key     []byte
	keyHdr  []string

	ledger Ledger
	latUs  []uint32 // one per answered reservation, merged into HDR at the end

	successes, failures, errors, invalid, retries, seatsSold int64
}

// newWorker makes a worker sending through client ci of group gr.
func newWorker(g *Generator, gr *genGroup, ci, seq, expect int) *worker {
	w := &worker{
		g: g, gr: gr, client: gr.clients[ci], base: gr.clientBase[ci], node: gr.clientNode[ci],
		rng:    rand.New(rand.NewPCG(g.cfg.Seed, uint64(seq))),
		body:   make([]byte, 0, 256),
		resp:   make([]byte, 0, 1024),
		path:   make([]byte, 0, 64),
		key:    make([]byte, 0, 96),
		keyHdr: make([]string, 1),
		latUs:  make([]uint32, 0, expect),
	}
	// GetBody lets the transport resend the body when a reused connection
	// turns out to be dead. It is only called during a round trip, while
	// the source still holds that request's body.
	w.getBody = func() (io.ReadCloser, error) { return w.src.reader(), nil }
	post := gr.clientPost[ci]
	w.post = &http.Request{
		Method: http.MethodPost, URL: post, Host: post.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}},
	}
	u := *w.base // the GET's path changes per request, so each worker owns a copy
	w.get = &http.Request{
		Method: http.MethodGet, URL: &u, Host: u.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{},
	}
	return w
}

func (w *worker) run(ctx context.Context) {
	// Requests are built once per worker; binding the context here keeps
	// ctrl-C able to abort a request in flight.
	w.post = w.post.WithContext(ctx)
	w.get = w.get.WithContext(ctx)
	for ctx.Err() == nil {
		i := w.gr.next.Add(1) - 1
		if i >= w.gr.n {
			return
		}
		w.reserve(i)
		w.g.done.Add(1)
	}
}

type outcome int

const (
	outSuccess outcome = iota
	outFailure
	outError
	outInvalid
)

func (w *worker) reserve(i int64) {
	area := w.rng.IntN(w.g.cfg.Areas)
	n := 1 + w.rng.IntN(maxSeats)
	w.body = append(w.body[:0], w.gr.bodyPrefix...)
	areaStart := len(w.body)
	w.body = strconv.AppendInt(w.body, int64(area), 10)
	areaEnd := len(w.body)
	w.body = append(w.body, `","numOfSeats":`...)
	w.body = strconv.AppendInt(w.body, int64(n), 10)
	w.body = append(w.body, `,"type":"RANDOM"}`...)

	start := time.Now()
	var out outcome
	if w.g.cfg.Flow == FlowCompat {
		out = w.compat()
	} else {
		out = w.native(i)
	}
	if out == outError {
		w.errors++
		w.g.errs.Add(1)
		return
	}
	us := time.Since(start).Microseconds()
	w.latUs = append(w.latUs, uint32(min(max(us, 1), maxLatencyUs)))
	w.g.cfg.Timeline.record(us)
	if out == outFailure {
		w.failures++
		return
	}
	if !w.g.cfg.CheckSeats {
		w.successes++
		return
	}
	if !bytes.Equal(w.reply.areaID, w.body[areaStart:areaEnd]) {
		w.g.sample(&w.g.invalidSamples, fmt.Sprintf("asked area %s, reply is for area %q", w.body[areaStart:areaEnd], w.reply.areaID))
		w.invalid++
		return
	}
	why := checkRandomSeats(w.reply.seats, n, gridRows, gridCols)
	// A reply with the wrong seat shape still took the seats it names; they
	// count for double booking as long as they are in the grid.
	for _, s := range w.reply.seats {
		if s.Row < gridRows && s.Col < gridCols {
			w.ledger.Add(w.gr.idx, area, s)
		}
	}
	if why != "" {
		w.g.sample(&w.g.invalidSamples, fmt.Sprintf("area %d: %s: %s", area, why, clip(w.resp)))
		w.invalid++
		return
	}
	w.successes++
	w.seatsSold += int64(len(w.reply.seats))
}

// compat is the peer's flow: POST returns a reservation id as text, GET
// long-polls for the result.
func (w *worker) compat() outcome {
	reply, err := w.do(w.post, w.body)
	if err != nil {
		return w.fail("POST reservation: %v", err)
	}
	if w.status != http.StatusOK {
		return w.fail("POST reservation: status %d: %s", w.status, clip(reply))
	}
	id := bytes.TrimSpace(reply)
	if !validID(id) {
		return w.fail("POST reservation: reply %q is not a reservation id", clip(reply))
	}
	w.path = append(append(w.path[:0], w.base.Path...), "v1/reservation/"...)
	w.path = append(w.path, id...)
	w.get.URL.Path = string(w.path)
	reply, err = w.do(w.get, nil)
	if err != nil {
		return w.fail("GET reservation: %v", err)
	}
	if w.status != http.StatusOK {
		return w.fail("GET reservation: status %d: %s", w.status, clip(reply))
	}
	return w.result(reply, "GET reservation")
}

// native is Surge's one-round-trip flow; the idempotency key makes the
// peer-style retries safe.
func (w *worker) native(i int64) outcome {
	w.key = strconv.AppendInt(append(w.key[:0], w.gr.keyPrefix...), i, 10)
	w.keyHdr[0] = string(w.key)
	w.post.Header["Idempotency-Key"] = w.keyHdr
	reply, err := w.do(w.post, w.body)
	if err != nil {
		return w.fail("POST /v2/reservations: %v", err)
	}
	switch w.status {
	case http.StatusCreated, http.StatusConflict:
		out := w.result(reply, "POST /v2/reservations")
		if (out == outSuccess) != (w.status == http.StatusCreated) && out != outError {
			return w.fail("POST /v2/reservations: status %d with state %s", w.status, w.reply.state)
		}
		return out
	default:
		return w.fail("POST /v2/reservations: status %d: %s", w.status, clip(reply))
	}
}

func (w *worker) result(reply []byte, what string) outcome {
	if err := parseReservation(reply, &w.reply); err != nil {
		return w.fail("%s: %v: %s", what, err, clip(reply))
	}
	switch {
	case bytes.Equal(w.reply.state, stateReserved):
		return outSuccess
	case bytes.Equal(w.reply.state, stateFailed):
		return outFailure
	default:
		return w.fail("%s: state %q: %s", what, w.reply.state, clip(reply))
	}
}

func (w *worker) fail(format string, args ...any) outcome {
	w.g.sample(&w.g.errorSamples, fmt.Sprintf(format, args...))
	return outError
}

// do sends req, with body if it is not nil, and reads the whole reply into
// the worker's buffer; w.status holds the final status. Transport errors,
// 5xx and 429 (Surge's backpressure answer) are retried like the peer does.
func (w *worker) do(req *http.Request, body []byte) ([]byte, error) {
	if body != nil {
		w.src.set(body)
	}
	var err error
	for attempt := 0; ; attempt++ {
		if body != nil {
			req.Body = w.src.reader()
			req.ContentLength = int64(len(body))
			req.GetBody = w.getBody
		}
		// The transport directly: the client's redirect and cookie handling
		// cost allocations per request and the API has no redirects.
		var resp *http.Response
		resp, err = w.client.Transport.RoundTrip(req)
		if err == nil {
			w.resp, err = readReply(resp.Body, w.resp[:0])
			resp.Body.Close()
			w.status = resp.StatusCode
			if err == nil && !retryable(resp.StatusCode) {
				return w.resp, nil
			}
			if err == nil {
				err = fmt.Errorf("status %d after %d retries: %s", resp.StatusCode, attempt, clip(w.resp))
			}
		}
		if cerr := req.Context().Err(); cerr != nil {
			return nil, cerr
		}
		if attempt == maxRetries {
			return nil, err
		}
		w.retries++
		// A short, growing pause: immediate retries against an overloaded
		// server only add to its load.
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
}

// bodySource holds a worker's request body, reused from one request to the
// next. A transport may still read a request's body after its response has
// arrived (HTTP/2 sends the body from its own goroutine, and a server may
// answer before reading it), so every request reads through its own small
// bodyReader, which stops once the source has moved on to a newer body
// instead of reading the next request's bytes.
type bodySource struct {
	mu  sync.Mutex
	gen uint64
	b   []byte
}

func (s *bodySource) set(b []byte) {
	s.mu.Lock()
	s.gen++
	s.b = append(s.b[:0], b...)
	s.mu.Unlock()
}

func (s *bodySource) reader() *bodyReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &bodyReader{src: s, gen: s.gen}
}

type bodyReader struct {
	src *bodySource
	gen uint64
	off int
}

var errBodyReused = errors.New("request body already replaced by a newer request")

func (r *bodyReader) Read(p []byte) (int, error) {
	s := r.src
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != r.gen {
		return 0, errBodyReused
	}
	if r.off >= len(s.b) {
		return 0, io.EOF
	}
	n := copy(p, s.b[r.off:])
	r.off += n
	return n, nil
}

func (*bodyReader) Close() error { return nil }

func retryable(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}

func readReply(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxReplyBytes {
				return buf, fmt.Errorf("reply larger than %d bytes", maxReplyBytes)
			}
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// validID accepts what a reservation id can be (a UUID, or any short token
// of URL-safe characters) so it can go into the GET path unescaped.
func validID(id []byte) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func clip(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// peerEventBody is the event the peer's load test creates: areas of the
// seat grid, each named by its index.
func peerEventBody(eventID string, areas int) ([]byte, error) {
	type area struct {
		AreaID   string `json:"areaId"`
		Price    int    `json:"price"`
		RowCount int    `json:"rowCount"`
		ColCount int    `json:"colCount"`
	}
	ev := struct {
		EventName string `json:"eventName"`
		Artist    string `json:"artist"`
		Areas     []area `json:"areas"`
	}{EventName: eventID, Artist: "go-load-test"}
	for a := range areas {
		ev.Areas = append(ev.Areas, area{AreaID: strconv.Itoa(a), Price: 100, RowCount: gridRows, ColCount: gridCols})
	}
	return json.Marshal(ev)
}
