package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/surge-run/surge/internal/ids"
	"github.com/surge-run/surge/internal/jsonscan"
)

// The peer's k6 load test, as docs/BENCHMARKS.md describes it.
const (
	commerceCustomers     = 100
	commerceProducts      = 100
	commerceStock         = 100_000 // the peer's quantityOnHand per product
	commerceOrderRoll     = 60      // roll < 60: create an order
	commerceSagaRoll      = 6       // roll < 6: also time its saga (10 % of orders)
	commerceReserveRoll   = 85      // 60..85: reserve 1 unit; 85..100: create a customer
	commercePollEvery     = 200 * time.Millisecond
	commerceSagaTimeout   = 10 * time.Second
	commerceLongPollParam = "?wait=10s"
)

// Request types the report breaks HTTP latency down by.
const (
	reqOrder    = "order create"
	reqReserve  = "stock reserve"
	reqCustomer = "customer create"
	reqPoll     = "order poll GET"
)

var commerceReqTypes = []string{reqOrder, reqReserve, reqCustomer, reqPoll}

// Saga timing modes: the peer's polling, and Surge's long poll.
const (
	sagaNone = iota
	sagaPoll
	sagaLongPoll
)

// CommerceOptions are the flags of `surge bench commerce`.
type CommerceOptions struct {
	Rate        float64   // iterations/s when Levels is empty
	Levels      []float64 // iterations/s, run in sequence
	Duration    time.Duration
	Clients     int
	MaxInflight int // iterations in flight at once; beyond it "not sent"
	HTTP2       bool
	Baseline    bool
	Seed        uint64

	Options
}

func (o CommerceOptions) levels() []float64 {
	if len(o.Levels) > 0 {
		return o.Levels
	}
	return []float64{o.Rate}
}

func (o CommerceOptions) validate() error {
	for _, r := range o.levels() {
		if r <= 0 {
			return fmt.Errorf("rate %v: want > 0 iterations/s", r)
		}
	}
	if o.Duration <= 0 || o.Clients < 1 || o.MaxInflight < 1 {
		return errors.New("--duration, --clients and --max-inflight must be positive")
	}
	return nil
}

// stockPerProduct is the seeded quantityOnHand: the peer's 100,000, or
// twice what the whole run could take from one product if that is more.
// Every iteration takes at most one unit (an order's line item or a direct
// reservation), spread uniformly over the products, and nothing the bench
// does gives stock back, so a run never meets 409 for want of stock.
func (o CommerceOptions) stockPerProduct() int64 {
	var total float64
	for _, r := range o.levels() {
		total += r * o.Duration.Seconds()
	}
	need := int64(2 * total * float64(commerceReserveRoll) / 100 / commerceProducts)
	return max(commerceStock, need)
}

// mix is one iteration's choices, a pure function of (seed, iteration):
// the run is reproducible whatever order the iterations finish in.
type mix struct {
	roll     int // 0..99
	customer int
	product  int
	key      uint64 // for the reservation's order id and the new customer's email
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func commerceMix(seed uint64, i int64) mix {
	h := splitmix(seed*0x100000001b3 ^ uint64(i))
	h2 := splitmix(h)
	return mix{
		roll:     int(h % 100),
		customer: int((h >> 8) % commerceCustomers),
		product:  int((h >> 24) % commerceProducts),
		key:      h2,
	}
}

// planner assigns each timed saga its mode, alternating poll and long
// poll; the scheduler calls it in iteration order, so it is deterministic.
type planner struct {
	seed  uint64
	sagas int64
}

func (p *planner) next(i int64) (mix, int) {
	m := commerceMix(p.seed, i)
	mode := sagaNone
	if m.roll < commerceSagaRoll {
		mode = sagaPoll
		if p.sagas%2 == 1 {
			mode = sagaLongPoll
		}
		p.sagas++
	}
	return m, mode
}

// commerceSeed is what seeding created: the ids and every pre-built body.
type commerceSeed struct {
	customers []string
	products  []string
	// orderBodies[c*commerceProducts+p]: customer c orders one of product p.
	orderBodies  [][]byte
	reserveURLs  []string // per product
	ordersURL    string
	customersURL string
	orderURL     string // + id
}

// commerceRun is one level against one server.
type commerceRun struct {
	base    string
	clients []*http.Client
	next    atomic.Uint64
	seed    *commerceSeed
	o       CommerceOptions
	label   string

	sent, notSent, done, inflight atomic.Int64
	orders, reserves, reserve409  atomic.Int64
	customers                     atomic.Int64
	sagaPolls, sagaLongPolls      atomic.Int64
	sagaPollTimeouts, sagaLPTO    atomic.Int64
	cancelled                     atomic.Int64
	errs                          atomic.Int64

	mu       sync.Mutex
	http     map[string]*hdrhistogram.Histogram
	all      *hdrhistogram.Histogram
	poll, lp *hdrhistogram.Histogram
	lag      *hdrhistogram.Histogram
	errKinds map[string]int64
	samples  []string
	// timeline samples the level per interval for the charts: HTTP
	// latencies, iterations done, server CPU.
	timeline *Timeline

	bufs sync.Pool
}

func newCommerceRun(base string, clients []*http.Client, s *commerceSeed, o CommerceOptions, label string) *commerceRun {
	r := &commerceRun{base: base, clients: clients, seed: s, o: o, label: label,
		http: map[string]*hdrhistogram.Histogram{}, all: newHist(), poll: newHist(), lp: newHist(), lag: newHist(),
		errKinds: map[string]int64{}}
	for _, t := range commerceReqTypes {
		r.http[t] = newHist()
	}
	r.bufs.New = func() any { b := make([]byte, 0, 2048); return &b }
	return r
}

func (r *commerceRun) client() *http.Client {
	return r.clients[r.next.Add(1)%uint64(len(r.clients))]
}

// do sends one request and reads its reply into *buf; it returns the
// status, 0 with an error for a transport failure.
func (r *commerceRun) do(ctx context.Context, method, url string, body []byte, buf *[]byte) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header["Content-Type"] = []string{"application/json"}
	}
	resp, err := r.client().Transport.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	*buf, err = readReply(resp.Body, (*buf)[:0])
	resp.Body.Close()
	return resp.StatusCode, err
}

func (r *commerceRun) record(h string, us int64) {
	us = min(max(us, 1), maxLatencyUs)
	r.mu.Lock()
	_ = r.http[h].RecordValue(us)
	_ = r.all.RecordValue(us)
	r.mu.Unlock()
	r.timeline.latency(us)
}

func (r *commerceRun) fail(kind, detail string) {
	r.errs.Add(1)
	r.mu.Lock()
	r.errKinds[kind]++
	if len(r.samples) < maxSamples {
		r.samples = append(r.samples, kind+": "+detail)
	}
	r.mu.Unlock()
}

// httpFail classifies a failed request: a transport error or an
// unexpected status.
func (r *commerceRun) httpFail(what string, status int, err error, reply []byte) {
	switch {
	case err != nil && status == 0:
		r.fail(what+": transport", err.Error())
	case err != nil:
		r.fail(what+": reading reply", err.Error())
	default:
		r.fail(what+": status "+strconv.Itoa(status), clip(reply))
	}
}

// iteration runs one iteration of the mix, due at at.
func (r *commerceRun) iteration(ctx context.Context, i int64, m mix, mode int, at time.Time) {
	bp := r.bufs.Get().(*[]byte)
	defer r.bufs.Put(bp)
	sendAt := time.Now()
	r.mu.Lock()
	_ = r.lag.RecordValue(min(max(sendAt.Sub(at).Microseconds(), 1), maxLatencyUs))
	r.mu.Unlock()
	s := r.seed
	switch {
	case m.roll < commerceOrderRoll:
		r.orders.Add(1)
		st, err := r.do(ctx, http.MethodPost, s.ordersURL, s.orderBodies[m.customer*commerceProducts+m.product], bp)
		if ctx.Err() != nil {
			return
		}
		if err != nil || st != http.StatusCreated {
			r.httpFail(reqOrder, st, err, *bp)
			return
		}
		r.record(reqOrder, time.Since(at).Microseconds())
		if mode == sagaNone {
			return
		}
		id := jsonscan.Field(*bp, "orderId")
		if !validID(id) {
			r.fail("order create: no usable orderId", clip(*bp))
			return
		}
		r.saga(ctx, string(id), mode, at, bp)
	case m.roll < commerceReserveRoll:
		r.reserves.Add(1)
		body := fmt.Appendf(nil, `{"quantity":1,"orderId":"perftest-%s"}`, uuidOf(m.key))
		st, err := r.do(ctx, http.MethodPost, s.reserveURLs[m.product], body, bp)
		if ctx.Err() != nil {
			return
		}
		if err != nil || (st != http.StatusOK && st != http.StatusConflict) {
			r.httpFail(reqReserve, st, err, *bp)
			return
		}
		if st == http.StatusConflict {
			r.reserve409.Add(1)
		}
		r.record(reqReserve, time.Since(at).Microseconds())
	default:
		r.customers.Add(1)
		body := fmt.Appendf(nil, `{"email":"perf-%016x@example.com","name":"Perf Customer","address":"1 Load Street","phone":"+1-555-0100"}`, m.key)
		st, err := r.do(ctx, http.MethodPost, s.customersURL, body, bp)
		if ctx.Err() != nil {
			return
		}
		if err != nil || st != http.StatusCreated {
			r.httpFail(reqCustomer, st, err, *bp)
			return
		}
		r.record(reqCustomer, time.Since(at).Microseconds())
	}
}

// saga waits for the order to be terminal, by polling every 200 ms like
// the peer (the first GET at once) or by long polls, and records the time
// from when the iteration was due.
func (r *commerceRun) saga(ctx context.Context, id string, mode int, at time.Time, bp *[]byte) {
	url := r.seed.orderURL + id
	if mode == sagaLongPoll {
		r.sagaLongPolls.Add(1)
		url += commerceLongPollParam
	} else {
		r.sagaPolls.Add(1)
	}
	deadline := at.Add(commerceSagaTimeout)
	for {
		t0 := time.Now()
		st, err := r.do(ctx, http.MethodGet, url, nil, bp)
		if ctx.Err() != nil {
			return
		}
		if err != nil || st != http.StatusOK {
			r.httpFail(reqPoll, st, err, *bp)
			return
		}
		if mode == sagaPoll {
			r.record(reqPoll, time.Since(t0).Microseconds())
		}
		switch string(jsonscan.Field(*bp, "status")) {
		case "CONFIRMED", "CANCELLED":
			if string(jsonscan.Field(*bp, "status")) == "CANCELLED" {
				r.cancelled.Add(1)
			}
			us := min(max(time.Since(at).Microseconds(), 1), maxLatencyUs)
			r.mu.Lock()
			if mode == sagaLongPoll {
				_ = r.lp.RecordValue(us)
			} else {
				_ = r.poll.RecordValue(us)
			}
			r.mu.Unlock()
			return
		case "PENDING":
		default:
			r.fail("order poll GET: unknown status", clip(*bp))
			return
		}
		now := time.Now()
		if !now.Before(deadline) {
			// Like the peer, a saga still PENDING after 10 s counts as
			// taking the full 10 s.
			us := commerceSagaTimeout.Microseconds()
			r.mu.Lock()
			if mode == sagaLongPoll {
				r.sagaLPTO.Add(1)
				_ = r.lp.RecordValue(us)
			} else {
				r.sagaPollTimeouts.Add(1)
				_ = r.poll.RecordValue(us)
			}
			r.mu.Unlock()
			return
		}
		if mode == sagaPoll {
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(commercePollEvery, deadline.Sub(now))):
			}
		}
	}
}

// openLoop schedules iterations on a fixed clock, rate per second for d,
// whether or not earlier ones were answered; at most MaxInflight run at
// once, and an iteration due while that many are in flight is not sent.
func (r *commerceRun) openLoop(ctx context.Context, rate float64, d time.Duration) time.Duration {
	sem := make(chan struct{}, r.o.MaxInflight)
	var wg sync.WaitGroup
	pl := &planner{seed: r.o.Seed}
	elapsed := schedule(ctx, rate, d, func(i int64, at time.Time) {
		m, mode := pl.next(i)
		select {
		case sem <- struct{}{}:
			r.sent.Add(1)
			r.inflight.Add(1)
			wg.Go(func() {
				defer func() { r.inflight.Add(-1); r.done.Add(1); r.timeline.done(); <-sem }()
				r.iteration(ctx, i, m, mode, at)
			})
		default:
			r.notSent.Add(1)
		}
	})
	wg.Wait()
	return elapsed
}

func (r *commerceRun) startProgress(total int64, d time.Duration) (stop func()) {
	every := 2 * time.Second
	if r.o.ProgressTTY {
		every = 250 * time.Millisecond
	}
	start := time.Now()
	last, lastAt := int64(0), start
	return progress(r.o.Stderr, r.o.ProgressTTY, every, func() string {
		sent, now := r.sent.Load(), time.Now()
		rate := float64(sent-last) / now.Sub(lastAt).Seconds()
		last, lastAt = sent, now
		return fmt.Sprintf("%s  %.0f/%.0f s  sent %d/%d  %s it/s  in flight %d  not sent %d  errors %d",
			r.label, min(now.Sub(start), d).Seconds(), d.Seconds(), sent, total, grouped(int64(rate)),
			r.inflight.Load(), r.notSent.Load(), r.errs.Load())
	})
}

// measure runs one level and returns its report; cpu reads the server's
// CPU seconds (nil when unknown).
func (r *commerceRun) measure(ctx context.Context, rate float64, cpu func() (float64, error)) *CommerceRunReport {
	m := meterCPU(cpu)
	r.timeline = newTimeline(r.o.SampleInterval, cpu)
	stop := r.startProgress(int64(rate*r.o.Duration.Seconds()), r.o.Duration)
	r.timeline.begin()
	elapsed := r.openLoop(ctx, rate, r.o.Duration)
	points := r.timeline.end()
	stop()
	rep := r.report(rate, elapsed)
	rep.Timeline = points
	rep.GeneratorCPU = m.generator()
	if c, err := m.used(); err == nil {
		rep.setCPU(c)
	}
	return rep
}

// LatencyReport is a latency distribution in microseconds.
type LatencyReport struct {
	Count int64 `json:"count"`
	P50Us int64 `json:"p50Us"`
	P95Us int64 `json:"p95Us"`
	P99Us int64 `json:"p99Us"`
	MaxUs int64 `json:"maxUs"`
}

func latencyOf(h *hdrhistogram.Histogram) LatencyReport {
	if h.TotalCount() == 0 {
		return LatencyReport{}
	}
	return LatencyReport{Count: h.TotalCount(), P50Us: h.ValueAtQuantile(50), P95Us: h.ValueAtQuantile(95),
		P99Us: h.ValueAtQuantile(99), MaxUs: h.Max()}
}

// SagaReport is the saga end-to-end time of the timed orders, from when
// their iteration was due to the GET that saw them CONFIRMED or CANCELLED.
type SagaReport struct {
	LatencyReport
	Timeouts int64 `json:"timeouts"` // still PENDING after 10 s, counted as 10 s
}

// CommerceRunReport is one level against one server.
type CommerceRunReport struct {
	Server          string  `json:"server"`
	TargetRate      float64 `json:"targetPerSecond"`
	Seconds         float64 `json:"seconds"`
	Iterations      int64   `json:"iterations"` // sent
	NotSent         int64   `json:"notSent"`    // due while MaxInflight were in flight
	AchievedRate    float64 `json:"achievedPerSecond"`
	AchievedPercent float64 `json:"achievedPercentOfTarget"`
	RateMet         bool    `json:"achievedAtLeast99Percent"`

	Orders        int64 `json:"orders"`
	Reserves      int64 `json:"reserves"`
	Reserve409    int64 `json:"reserves409"` // not enough stock: a valid answer
	Customers     int64 `json:"customers"`
	SagasPolled   int64 `json:"sagasPolled"`
	SagasLongPoll int64 `json:"sagasLongPolled"`
	Cancelled     int64 `json:"sagasCancelled"`

	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errorsByKind"`
	ErrorSamples []string         `json:"errorSamples,omitempty"`

	// HTTP latency per request type: creates and reservations from when
	// their iteration was due (open loop), poll GETs from when sent.
	HTTP         map[string]LatencyReport `json:"http"`
	HTTPAll      LatencyReport            `json:"httpAll"`
	SagaPoll     SagaReport               `json:"sagaE2EPolling"`
	SagaLongPoll SagaReport               `json:"sagaE2ELongPoll"`
	SendLagP99Us int64                    `json:"sendLagP99Us"` // how late the generator sent

	ServerCPU         *float64 `json:"serverCpuSeconds,omitempty"`
	CPUPerIterUs      *float64 `json:"serverCpuPerIterationUs,omitempty"`
	ItersPerCPUSecond *float64 `json:"iterationsPerServerCpuSecond,omitempty"`
	GeneratorCPU      float64  `json:"generatorCpuSeconds"`
	PeakRSSBytes      *int64   `json:"serverPeakRssBytes,omitempty"`
	// Timeline is the level per interval (timeline.go): iterations done,
	// HTTP latencies, server CPU.
	Timeline []TimelinePoint `json:"timeline,omitempty"`
}

func (r *commerceRun) report(rate float64, elapsed time.Duration) *CommerceRunReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := &CommerceRunReport{
		TargetRate: rate, Seconds: elapsed.Seconds(), Iterations: r.sent.Load(), NotSent: r.notSent.Load(),
		Orders: r.orders.Load(), Reserves: r.reserves.Load(), Reserve409: r.reserve409.Load(), Customers: r.customers.Load(),
		SagasPolled: r.sagaPolls.Load(), SagasLongPoll: r.sagaLongPolls.Load(), Cancelled: r.cancelled.Load(),
		Errors: r.errs.Load(), ErrorsByKind: map[string]int64{}, ErrorSamples: r.samples,
		HTTP: map[string]LatencyReport{}, HTTPAll: latencyOf(r.all),
		SagaPoll:     SagaReport{LatencyReport: latencyOf(r.poll), Timeouts: r.sagaPollTimeouts.Load()},
		SagaLongPoll: SagaReport{LatencyReport: latencyOf(r.lp), Timeouts: r.sagaLPTO.Load()},
	}
	for k, v := range r.errKinds {
		rep.ErrorsByKind[k] = v
	}
	for _, t := range commerceReqTypes {
		rep.HTTP[t] = latencyOf(r.http[t])
	}
	if r.lag.TotalCount() > 0 {
		rep.SendLagP99Us = r.lag.ValueAtQuantile(99)
	}
	if rep.Seconds > 0 {
		rep.AchievedRate = float64(rep.Iterations) / rep.Seconds
	}
	rep.AchievedPercent = 100 * rep.AchievedRate / rate
	rep.RateMet = rep.AchievedPercent >= 99
	return rep
}

func (r *CommerceRunReport) setCPU(cpu float64) {
	r.ServerCPU = &cpu
	if r.Iterations > 0 {
		us := cpu * 1e6 / float64(r.Iterations)
		r.CPUPerIterUs = &us
	}
	if cpu > 0 {
		v := float64(r.Iterations) / cpu
		r.ItersPerCPUSecond = &v
	}
}

// uuidOf is a version-4 UUID derived from k: the reservation ids are
// reproducible from the seed.
func uuidOf(k uint64) string { return ids.FromUint64s(k, splitmix(k)).String() }

// seedCommerce creates the peer's 100 customers and 100 products and
// pre-builds every request body the mix sends that does not carry a
// per-iteration id.
func seedCommerce(ctx context.Context, base string, c *http.Client, seed uint64, stock int64) (*commerceSeed, error) {
	s := &commerceSeed{ordersURL: base + "/api/orders", customersURL: base + "/api/customers", orderURL: base + "/api/orders/"}
	r := &commerceRun{clients: []*http.Client{c}}
	buf := make([]byte, 0, 2048)
	run := strconv.FormatUint(seed, 36) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	post := func(url string, body []byte, field string) (string, error) {
		st, err := r.do(ctx, http.MethodPost, url, body, &buf)
		if err != nil {
			return "", err
		}
		if st != http.StatusCreated {
			return "", fmt.Errorf("POST %s: status %d: %s", url, st, clip(buf))
		}
		id := jsonscan.Field(buf, field)
		if !validID(id) {
			return "", fmt.Errorf("POST %s: no usable %s in %s", url, field, clip(buf))
		}
		return string(id), nil
	}
	for i := range commerceCustomers {
		body := fmt.Appendf(nil, `{"email":"perf-seed-%d-%s@example.com","name":"Perf Customer %d","address":"%d Load Street","phone":"+1-555-0100"}`, i, run, i, i+1)
		id, err := post(s.customersURL, body, "customerId")
		if err != nil {
			return nil, fmt.Errorf("seed customer %d: %w", i, err)
		}
		s.customers = append(s.customers, id)
	}
	for i := range commerceProducts {
		// Price 9.99..2999.99, reproducible from the seed.
		cents := 999 + splitmix(seed+uint64(i))%(299999-999+1)
		body := fmt.Appendf(nil, `{"sku":"PERF-%s-%03d","name":"Perf product %d","description":"load test product","price":%d.%02d,"quantityOnHand":%d,"category":"perf"}`,
			run, i, i, cents/100, cents%100, stock)
		id, err := post(base+"/api/products", body, "productId")
		if err != nil {
			return nil, fmt.Errorf("seed product %d: %w", i, err)
		}
		s.products = append(s.products, id)
		s.reserveURLs = append(s.reserveURLs, base+"/api/products/"+id+"/stock/reserve")
	}
	for _, c := range s.customers {
		for _, p := range s.products {
			s.orderBodies = append(s.orderBodies,
				fmt.Appendf(nil, `{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1,"unitPrice":"10.00"}]}`, c, p))
		}
	}
	return s, nil
}

// CommerceReport is everything `surge bench commerce` measured; --json
// writes it.
type CommerceReport struct {
	Benchmark string           `json:"benchmark"`
	Config    CommerceConfig   `json:"config"`
	Levels    []*CommerceLevel `json:"levels"`
	Peer      CommercePeer     `json:"peer"`
	Verdict
	StockPerProduct int64 `json:"stockPerProduct"`
}

// CommerceConfig records the flags a run used.
type CommerceConfig struct {
	Levels          []float64 `json:"levelsPerSecond"`
	DurationSeconds float64   `json:"durationSeconds"`
	Clients         int       `json:"clients"`
	MaxInflight     int       `json:"maxInflight"`
	HTTP2           bool      `json:"http2"`
	Baseline        bool      `json:"baseline"`
	Target          string    `json:"target,omitempty"`
	Partitions      int       `json:"partitions,omitempty"`
	Seed            uint64    `json:"seed"`
}

// CommercePeer is the peer's published figures, printed beside ours.
type CommercePeer struct {
	MaxRate           float64 `json:"maxIterationsPerSecond"`
	VCPU              int     `json:"vcpu"`
	ItersPerVCPUSec   float64 `json:"iterationsPerVcpuSecond"`
	HTTPP95Ms         float64 `json:"httpP95Ms"`
	SagaP95TimeoutAt  float64 `json:"sagaE2EP95AtTimeoutFromPerSecond"`
	SagaTimeoutSecond float64 `json:"sagaTimeoutSeconds"`
}

var commercePeer = CommercePeer{MaxRate: 200, VCPU: 24, ItersPerVCPUSec: 8, HTTPP95Ms: 99, SagaP95TimeoutAt: 50, SagaTimeoutSecond: 10}

// CommerceLevel is one arrival rate against the server and, if run, the
// do-nothing baseline, with the goals.
type CommerceLevel struct {
	Rate     float64            `json:"targetPerSecond"`
	Server   *CommerceRunReport `json:"server"`
	Baseline *CommerceRunReport `json:"baseline,omitempty"`
	Goals    []Goal             `json:"goals"`
}

// The commerce goals, judged in one run against the do-nothing server.
const (
	commerceGoalP99Multiple = 1.5
	commerceGoalSagaP99Ms   = 20
	commerceGoalCPUMultiple = 2
	commerceGoalPerCPUSec   = 10_000
	commerceGoalRatePercent = 99
)

func (l *CommerceLevel) judge() {
	s, b := l.Server, l.Baseline
	l.Goals = nil
	if s == nil {
		return
	}
	pct, errs := s.AchievedPercent, float64(s.Errors)
	l.Goals = append(l.Goals,
		goal("achieved rate, % of target", "≥ 99 %", "%", &pct, func(v float64) bool { return v >= commerceGoalRatePercent }, ""),
		goal("errors", "0", "", &errs, func(v float64) bool { return v == 0 }, ""))
	var p99x *float64
	if b != nil && b.HTTPAll.P99Us > 0 && s.HTTPAll.Count > 0 {
		v := float64(s.HTTPAll.P99Us) / float64(b.HTTPAll.P99Us)
		p99x = &v
	}
	l.Goals = append(l.Goals, goal("HTTP p99 ÷ do-nothing's", "≤ 1.5×", "×", p99x, func(v float64) bool { return v <= commerceGoalP99Multiple }, ""))
	var saga *float64
	if s.SagaLongPoll.Count > 0 {
		v := float64(s.SagaLongPoll.P99Us) / 1e3
		saga = &v
	}
	l.Goals = append(l.Goals, goal("saga E2E p99, long poll (ms)", "< 20 ms", "ms", saga, func(v float64) bool { return v < commerceGoalSagaP99Ms }, ""))
	var cpux *float64
	if b != nil && s.CPUPerIterUs != nil && b.CPUPerIterUs != nil && *b.CPUPerIterUs > 0 {
		v := *s.CPUPerIterUs / *b.CPUPerIterUs
		cpux = &v
	}
	l.Goals = append(l.Goals,
		goal("server CPU per iteration ÷ do-nothing's", "≤ 2×", "×", cpux, func(v float64) bool { return v <= commerceGoalCPUMultiple }, ""),
		goal("iterations per server CPU-second", "≥ 10,000", "", s.ItersPerCPUSecond, func(v float64) bool { return v >= commerceGoalPerCPUSec },
			fmt.Sprintf("peer ≈ %.0f per vCPU-second", commercePeer.ItersPerVCPUSec)))
}

var errCommerceFailed = errors.New("commerce bench failed")

// RunCommerce seeds the server (and the do-nothing baseline), then runs
// each level of the open-loop mix against both, prints the report and
// writes the JSON.
func RunCommerce(ctx context.Context, o CommerceOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	rep := &CommerceReport{Benchmark: "commerce", Peer: commercePeer, StockPerProduct: o.stockPerProduct(),
		Config: CommerceConfig{Levels: o.levels(), DurationSeconds: o.Duration.Seconds(), Clients: o.Clients, MaxInflight: o.MaxInflight,
			HTTP2: o.HTTP2, Baseline: o.Baseline, Target: o.Target, Partitions: o.Partitions, Seed: o.Seed}}
	return runScenario(ctx, o.Options, "surge-bench-commerce-", &commerceBench{o: o, rep: rep})
}

// commerceBench is the commerce scenario: the mix at each level against
// the server and, unless --baseline=false, the do-nothing server.
type commerceBench struct {
	o   CommerceOptions
	rep *CommerceReport
}

func (b *commerceBench) setup(context.Context, *Rig) error { return nil }
func (b *commerceBench) report() any                       { return b.rep }
func (b *commerceBench) verdict() *Verdict                 { return &b.rep.Verdict }
func (b *commerceBench) passed() string                    { return "OK: no errors" }
func (b *commerceBench) failed() error                     { return errCommerceFailed }

func (b *commerceBench) judge(io.Writer) {
	for _, l := range b.rep.Levels {
		if l.Server != nil && l.Server.Errors > 0 {
			b.rep.add(fmt.Sprintf("%s it/s: %d errors", grouped(int64(l.Rate)), l.Server.Errors))
		}
	}
}

func (b *commerceBench) load(ctx context.Context, rig *Rig) error {
	o, rep := b.o, b.rep
	clients := make([]*http.Client, o.Clients)
	for i := range clients {
		clients[i] = newHTTPClient(o.HTTP2, o.MaxInflight, o.Conn)
		defer clients[i].CloseIdleConnections()
	}
	var null *child
	var nullSeed *commerceSeed
	if o.Baseline {
		var err error
		if null, err = rig.startNull(ctx, "", "null-commerce"); err != nil {
			return err
		}
		if nullSeed, err = seedCommerce(ctx, null.baseURL(), clients[0], o.Seed, rep.StockPerProduct); err != nil {
			return fmt.Errorf("do-nothing server: %w", err)
		}
	}
	srv, err := rig.target(ctx, "", "surge-commerce", "data", "commerce")
	if err != nil {
		return err
	}
	rig.logf("seeding %d customers and %d products (quantityOnHand %s)", commerceCustomers, commerceProducts, grouped(rep.StockPerProduct))
	srvSeed, err := seedCommerce(ctx, srv.base, clients[0], o.Seed, rep.StockPerProduct)
	if err != nil {
		return err
	}
	for _, rate := range o.levels() {
		l := &CommerceLevel{Rate: rate}
		rep.Levels = append(rep.Levels, l)
		if null != nil {
			r := newCommerceRun(null.baseURL(), clients, nullSeed, o, fmt.Sprintf("%s it/s (do-nothing server)", grouped(int64(rate))))
			l.Baseline = r.measure(ctx, rate, null.cpuSeconds)
			l.Baseline.Server = "null"
			l.Baseline.PeakRSSBytes = peakOf(null)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		r := newCommerceRun(srv.base, clients, srvSeed, o, fmt.Sprintf("%s it/s", grouped(int64(rate))))
		l.Server = r.measure(ctx, rate, srv.cpu(ctx))
		l.Server.Server = srv.name(o.Options)
		l.Server.PeakRSSBytes = srv.peakRSS()
		l.judge()
		writeCommerceLevel(o.Stdout, rep, l)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err := srv.stop(); err != nil {
		return err
	}
	if null != nil {
		rig.stopNull(null)
	}
	return nil
}
