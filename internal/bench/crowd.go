package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/surge-run/surge/internal/ids"
)

// The peer's published crowd: 5 processes of `-a 80 -n 200000 -c 4`.
const (
	CrowdGroups       = 5
	crowdPeerAreas    = 80
	crowdPeerRequests = 200_000
)

// Client transports: the two h2c ones of --crowd-transport, and the
// peer's HTTP/1.1 client (--http2=false).
const (
	CrowdTransportXNet    = "x/net" // the peer's: x/net/http2 with AllowHTTP
	CrowdTransportNetHTTP = "net/http"
	CrowdTransportHTTP1   = "http1" // the peer's without --http2: retryablehttp's pooled HTTP/1.1 client
)

// CrowdAreas is the number of areas that keeps the peer's ratio of seats
// to reservations (80 areas of 400 seats for 200,000 reservations, 0.16
// seats each) for n reservations per group, at least one.
func CrowdAreas(n int) int {
	return max(1, (crowdPeerAreas*n+crowdPeerRequests/2)/crowdPeerRequests)
}

// CrowdConfig is one flash crowd: Groups stand for the peer's processes,
// each with its own event of Areas areas and Clients HTTP clients, and all
// Groups × Reservations reservations start at once, each in its own
// goroutine, over the compatibility flow (POST, then GET the decision).
type CrowdConfig struct {
	BaseURL      string
	Groups       int
	Reservations int // per group
	Areas        int
	Clients      int // per group
	Seed         uint64
	// CheckSeats turns on the seat checks; the do-nothing server's fixed
	// answers would fail them.
	CheckSeats  bool
	PostTimeout time.Duration // each POST with its retries
	GetTimeout  time.Duration // each GET with its retries
	Transport   string        // CrowdTransportXNet (default), CrowdTransportNetHTTP or CrowdTransportHTTP1
	TLS         *tls.Config   // the clients' for an https:// BaseURL (--ca-file); nil: http:// only
	Label       string
	Progress    io.Writer // a progress line every few seconds; nil for none
	// Kill, if set, kills the server during the crowd and restarts it;
	// the crowd then reads back every id it was given (crowd_crash.go).
	Kill *CrowdKill

	rules retryRules // the peer's unless a test shortens the waits
}

func (c *CrowdConfig) validate() error {
	switch {
	case c.Groups < 1 || c.Groups >= maxGroups:
		return fmt.Errorf("groups %d: want 1..%d", c.Groups, maxGroups-1)
	case c.Areas < 1 || c.Areas >= maxAreas:
		return fmt.Errorf("areas %d: want 1..%d", c.Areas, maxAreas-1)
	case c.Reservations < 1:
		return fmt.Errorf("reservations %d: want at least 1", c.Reservations)
	case c.Clients < 1:
		return fmt.Errorf("clients %d: want at least 1", c.Clients)
	case c.Transport != "" && c.Transport != CrowdTransportXNet && c.Transport != CrowdTransportNetHTTP && c.Transport != CrowdTransportHTTP1:
		return fmt.Errorf("client transport %q: want %s, %s or %s", c.Transport, CrowdTransportXNet, CrowdTransportNetHTTP, CrowdTransportHTTP1)
	case c.PostTimeout <= 0 || c.GetTimeout <= 0:
		return fmt.Errorf("POST and GET timeouts must be positive")
	case c.Kill != nil:
		return c.Kill.validate()
	}
	return nil
}

// CrowdStats is what one crowd measured.
type CrowdStats struct {
	Reservations int64            `json:"reservations"`
	Reserved     int64            `json:"reserved"`
	Failed       int64            `json:"failed"` // answered FAILED (sold out): a served answer, not an error
	Errors       int64            `json:"errors"`
	ErrorPercent float64          `json:"errorPercent"`
	ErrorsByKind map[string]int64 `json:"errorsByKind"`
	// CompletionSeconds is from the crowd's start until its last
	// reservation ended (answered or given up).
	CompletionSeconds float64 `json:"completionSeconds"`
	// LastSeatSoldSeconds is when the last RESERVED answer arrived.
	LastSeatSoldSeconds float64 `json:"lastSeatSoldSeconds"`
	Requests            int64   `json:"requests"` // every attempt, retries included
	Posts               int64   `json:"postRequests"`
	Gets                int64   `json:"getRequests"`
	Retries             int64   `json:"retries"`
	Connections         int64   `json:"connectionsOpened"` // by the clients, set-up included
	// RefusalsByStatus counts 429 and 5xx answers; RetryAfter counts
	// their Retry-After values ("" for none).
	RefusalsByStatus map[string]int64 `json:"refusalsByStatus"`
	Refusals         int64            `json:"refusals"`
	RefusalPercent   float64          `json:"refusalPercentOfRequests"`
	RetryAfter       map[string]int64 `json:"retryAfter"`
	// AttemptErrors counts the transport errors of single attempts (the
	// retries that were not refusals), by kind.
	AttemptErrors  map[string]int64 `json:"attemptErrorsByKind"`
	SeatsSold      int64            `json:"seatsSold"`
	SeatsOffered   int64            `json:"seatsOffered"`
	DoubleBookings []DoubleBooking  `json:"doubleBookings"`
	// Latency of the reservations that got an answer, POST to GET's end,
	// retries and waits included.
	P50Us               int64    `json:"p50Us"`
	P95Us               int64    `json:"p95Us"`
	P99Us               int64    `json:"p99Us"`
	MaxUs               int64    `json:"maxUs"`
	GeneratorCPUSeconds float64  `json:"generatorCpuSeconds"`
	ErrorSamples        []string `json:"errorSamples,omitempty"`
	// Crash is the kill -9 mid-crowd and the read-back after it; nil
	// without a kill.
	Crash *CrowdCrash `json:"crash,omitempty"`
}

type crowdRunner struct {
	cfg    CrowdConfig
	rules  retryRules
	tally  *crowdTally
	groups []*crowdGroup
	done   atomic.Int64
	errs   atomic.Int64
	start  time.Time
	lastUs atomic.Int64 // µs from start to the last RESERVED answer

	// ids counts the ids POSTs returned, decisions the GETs that
	// answered RESERVED or FAILED; killNow closes when decisions reach
	// the kill's trigger (nil without one).
	ids, decisions atomic.Int64
	killNow        chan struct{}
	crash          *CrowdCrash // nil without a kill
}

type crowdGroup struct {
	idx       int
	eventID   string
	clients   []*http.Client
	postURL   string
	getPrefix string
	latUs     []uint32      // per reservation; 0 for one that ended in an error
	recs      []crowdRecord // per reservation, with a kill only: what to read back

	reserved, failed, seatsSold atomic.Int64

	mu     sync.Mutex
	ledger Ledger
}

func newCrowd(cfg CrowdConfig) (*crowdRunner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	base := strings.TrimRight(cfg.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && (cfg.TLS == nil || !strings.HasPrefix(base, "https://")) {
		return nil, fmt.Errorf("target %q: want http://host:port (or https:// with the clients' TLS configuration)", cfg.BaseURL)
	}
	c := &crowdRunner{cfg: cfg, rules: cfg.rules, tally: newCrowdTally()}
	if c.rules == (retryRules{}) {
		c.rules = peerRetryRules()
	}
	if k := cfg.Kill; k != nil {
		c.crash = &CrowdCrash{Trigger: k.trigger(), ReplayedRecords: -1, RecoverySeconds: -1, DoubleBookings: []DoubleBooking{}}
		if k.AfterDecisions > 0 {
			c.killNow = make(chan struct{})
		}
	}
	for gi := range cfg.Groups {
		gr := &crowdGroup{idx: gi, eventID: "event-" + ids.New().String(), latUs: make([]uint32, cfg.Reservations)}
		if cfg.Kill != nil {
			gr.recs = make([]crowdRecord, cfg.Reservations)
		}
		gr.postURL = base + "/v1/event/" + gr.eventID + "/reservation"
		gr.getPrefix = base + "/v1/reservation/"
		for range cfg.Clients {
			gr.clients = append(gr.clients, newCrowdClient(&c.tally.dials, cfg.Transport, cfg.TLS))
		}
		c.groups = append(c.groups, gr)
	}
	return c, nil
}

func (c *crowdRunner) close() {
	for _, gr := range c.groups {
		for _, hc := range gr.clients {
			hc.CloseIdleConnections()
		}
	}
}

// setup creates each group's event and has every client call the health
// check, as the peer's client does before it starts.
func (c *crowdRunner) setup(ctx context.Context) error {
	base := strings.TrimRight(c.cfg.BaseURL, "/")
	for _, gr := range c.groups {
		if err := c.createEvent(ctx, base, gr); err != nil {
			return fmt.Errorf("create event %s: %w", gr.eventID, err)
		}
		for _, hc := range gr.clients {
			ans, _, err := c.send(ctx, hc, http.MethodGet, base+"/v1/health_check", nil)
			if err == nil && ans.status != http.StatusOK {
				err = fmt.Errorf("status %d", ans.status)
			}
			if err != nil {
				return fmt.Errorf("health check: %w", err)
			}
		}
	}
	c.tally.reset() // the set-up's requests are not the crowd's
	return nil
}

func (c *crowdRunner) createEvent(ctx context.Context, base string, gr *crowdGroup) error {
	body, err := peerEventBody(gr.eventID, c.cfg.Areas)
	if err != nil {
		return err
	}
	ans, _, err := c.send(ctx, gr.clients[0], http.MethodPost, base+"/v1/event", body)
	if err != nil {
		return err
	}
	if ans.status != http.StatusOK {
		return fmt.Errorf("status %d: %s", ans.status, clip(ans.body))
	}
	return nil
}

// run starts every reservation of every group at once and returns when
// each has an answer or has given up; with a kill, once every id given
// out has also been read back from the restarted server.
func (c *crowdRunner) run(ctx context.Context) (*CrowdStats, error) {
	total := int64(c.cfg.Groups) * int64(c.cfg.Reservations)
	cpu0 := selfCPUSeconds()
	gate, crowdDone := make(chan struct{}), make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, gr := range c.groups {
		for i := range c.cfg.Reservations {
			wg.Go(func() {
				<-gate
				c.reserve(cctx, gr, i)
				c.done.Add(1)
			})
		}
	}
	c.start = time.Now()
	// After c.start is set: the progress lines read it.
	stop := c.startProgress(total)
	waitKill := func() {}
	if c.cfg.Kill != nil {
		waitKill = c.startKiller(ctx, crowdDone, cancel)
	}
	close(gate)
	wg.Wait()
	close(crowdDone)
	waitKill()
	elapsed := time.Since(c.start)
	cpu := selfCPUSeconds() - cpu0
	stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := c.collect(elapsed, cpu)
	if c.crash != nil {
		// After collect: the read-back's requests are not the crowd's.
		if c.crash.RestartError == "" {
			c.readback(ctx)
		}
		s.Crash = c.crash
	}
	return s, ctx.Err()
}

// reserve is one of the peer's goroutines: POST a RANDOM reservation of
// 1..4 seats in a random area, then GET its decision, each under its own
// deadline with the peer's retries.
func (c *crowdRunner) reserve(ctx context.Context, gr *crowdGroup, i int) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, uint64(gr.idx)<<32|uint64(i)))
	area, n := rng.IntN(c.cfg.Areas), 1+rng.IntN(maxSeats)
	body := fmt.Appendf(nil, `{"userId":"user123","eventId":%q,"areaId":"%d","numOfSeats":%d,"type":"RANDOM"}`, gr.eventID, area, n)
	hc := gr.clients[i%len(gr.clients)]
	start := time.Now()

	pctx, cancel := context.WithTimeout(ctx, c.cfg.PostTimeout)
	ans, kind, err := c.send(pctx, hc, http.MethodPost, gr.postURL, body)
	cancel()
	if err != nil {
		c.fail(kind, err.Error())
		return
	}
	id := bytes.TrimSpace(ans.body)
	if ans.status != http.StatusOK {
		c.fail(fmt.Sprintf("POST status %d", ans.status), clip(ans.body))
		return
	}
	if !validID(id) {
		c.fail("POST reply is not a reservation id", clip(ans.body))
		return
	}
	c.ids.Add(1)
	var rec *crowdRecord
	if gr.recs != nil {
		rec = &gr.recs[i]
		*rec = crowdRecord{id: string(id), area: area, n: n}
	}
	gctx, cancel := context.WithTimeout(ctx, c.cfg.GetTimeout)
	ans, kind, err = c.send(gctx, hc, http.MethodGet, gr.getPrefix+string(id), nil)
	cancel()
	if err != nil {
		c.fail(kind, err.Error())
		return
	}
	if ans.status != http.StatusOK {
		c.fail(fmt.Sprintf("GET status %d", ans.status), clip(ans.body))
		return
	}
	if !c.decided(gr, rec, area, n, ans.body) {
		return
	}
	gr.latUs[i] = uint32(min(max(time.Since(start).Microseconds(), 1), maxLatencyUs))
}

// decided reads the GET's reservation and records it, in rec too when
// the crowd keeps what it saw for a read-back; false if the reply was an
// error.
func (c *crowdRunner) decided(gr *crowdGroup, rec *crowdRecord, area, n int, body []byte) bool {
	var rep reservationReply
	if err := parseReservation(body, &rep); err != nil {
		c.fail("GET reply malformed", clip(body))
		return false
	}
	switch {
	case bytes.Equal(rep.state, stateFailed):
		gr.failed.Add(1)
		if rec != nil {
			rec.seen = seenFailed
		}
		c.decision()
		return true
	case !bytes.Equal(rep.state, stateReserved):
		c.fail(fmt.Sprintf("GET state %q", clip(rep.state)), clip(body))
		return false
	}
	if rec != nil {
		rec.seen, rec.seats = seenReserved, slices.Clone(rep.seats)
	}
	c.decision()
	if !c.cfg.CheckSeats {
		gr.reserved.Add(1)
		return true
	}
	why := checkRandomSeats(rep.seats, n, gridRows, gridCols)
	if string(rep.areaID) != strconv.Itoa(area) {
		why = fmt.Sprintf("asked area %d, reply is for area %q", area, rep.areaID)
	}
	// Seats named in a wrong reply were still taken; they count for
	// double booking.
	gr.mu.Lock()
	for _, s := range rep.seats {
		if s.Row >= 0 && s.Row < gridRows && s.Col >= 0 && s.Col < gridCols {
			gr.ledger.Add(gr.idx, area, s)
		}
	}
	gr.mu.Unlock()
	if why != "" {
		c.fail("GET reserved seats break the RANDOM contract", why)
		return false
	}
	gr.reserved.Add(1)
	gr.seatsSold.Add(int64(len(rep.seats)))
	us := time.Since(c.start).Microseconds()
	for {
		last := c.lastUs.Load()
		if us <= last || c.lastUs.CompareAndSwap(last, us) {
			return true
		}
	}
}

func (c *crowdRunner) fail(kind, detail string) {
	c.errs.Add(1)
	c.tally.fail(kind, detail)
}

func (c *crowdRunner) collect(elapsed time.Duration, cpu float64) *CrowdStats {
	t := c.tally
	s := &CrowdStats{
		CompletionSeconds:   elapsed.Seconds(),
		LastSeatSoldSeconds: float64(c.lastUs.Load()) / 1e6,
		Posts:               t.posts.Load(),
		Gets:                t.gets.Load(),
		Retries:             t.retries.Load(),
		Connections:         t.dials.Load(),
		SeatsOffered:        int64(c.cfg.Groups) * int64(c.cfg.Areas) * gridRows * gridCols,
		GeneratorCPUSeconds: cpu,
		ErrorsByKind:        map[string]int64{},
		RefusalsByStatus:    map[string]int64{},
		RetryAfter:          map[string]int64{},
		AttemptErrors:       map[string]int64{},
		DoubleBookings:      []DoubleBooking{},
	}
	s.Requests = s.Posts + s.Gets
	t.mu.Lock()
	for k, v := range t.errors {
		s.ErrorsByKind[k] = v
		s.Errors += v
	}
	for st, v := range t.refusals {
		s.RefusalsByStatus[strconv.Itoa(st)] = v
		s.Refusals += v
	}
	for k, v := range t.retryAfter {
		s.RetryAfter[k] = v
	}
	for k, v := range t.attemptErrors {
		s.AttemptErrors[k] = v
	}
	s.ErrorSamples = append([]string(nil), t.samples...)
	t.mu.Unlock()

	h := hdrhistogram.New(1, maxLatencyUs, 3)
	var ledgers []*Ledger
	for _, gr := range c.groups {
		s.Reserved += gr.reserved.Load()
		s.Failed += gr.failed.Load()
		s.SeatsSold += gr.seatsSold.Load()
		for _, us := range gr.latUs {
			if us > 0 {
				_ = h.RecordValue(int64(us))
			}
		}
		ledgers = append(ledgers, &gr.ledger)
	}
	s.Reservations = s.Reserved + s.Failed + s.Errors
	if s.Reservations > 0 {
		s.ErrorPercent = 100 * float64(s.Errors) / float64(s.Reservations)
	}
	if s.Requests > 0 {
		s.RefusalPercent = 100 * float64(s.Refusals) / float64(s.Requests)
	}
	s.P50Us, s.P95Us, s.P99Us = h.ValueAtQuantile(50), h.ValueAtQuantile(95), h.ValueAtQuantile(99)
	s.MaxUs = h.Max()
	if c.cfg.CheckSeats {
		s.DoubleBookings = append(s.DoubleBookings, FindDoubleBookings(ledgers...)...)
	}
	return s
}

func (c *crowdRunner) startProgress(total int64) (stop func()) {
	return progress(c.cfg.Progress, false, 2*time.Second, func() string {
		t := c.tally
		return fmt.Sprintf("%s  %.0f s  %d/%d done  errors %d  requests %d  connections %d",
			c.cfg.Label, time.Since(c.start).Seconds(), c.done.Load(), total, c.errs.Load(),
			t.posts.Load()+t.gets.Load(), t.dials.Load())
	})
}
