package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// OverloadOptions are the flags of `surge bench overload`.
type OverloadOptions struct {
	MaxQueueDelay string // --max-queue-delay for a spawned server ("": its default)

	Areas           int           // areas of the event, all in one partition
	Multiple        float64       // offered rate as a multiple of the measured capacity
	Rate            float64       // offered rate; if > 0 it replaces Multiple × capacity
	CapacitySeconds float64       // length of the closed-loop capacity phase
	Seconds         float64       // length of the open-loop overload phase
	Concurrency     int           // requests in flight in the capacity phase
	MaxInflight     int           // cap on requests in flight in the overload phase
	Clients         int           // HTTP clients (each its own connections)
	HTTP2           bool          // h2c with prior knowledge; HTTP/1.1 otherwise
	ClientTimeout   time.Duration // a request not answered by then counts as a timeout

	Options
}

// OverloadReport is what `surge bench overload` measured.
type OverloadReport struct {
	Benchmark  string  `json:"benchmark"`
	Target     string  `json:"target,omitempty"`
	Partitions int     `json:"partitions"`
	Areas      int     `json:"areas"`
	HTTP2      bool    `json:"http2"`
	TimeoutSec float64 `json:"clientTimeoutSeconds"`
	// Capacity is the closed-loop phase: accepted answers (201 and 409)
	// per second with Concurrency requests in flight, all on one partition.
	Capacity *PhaseReport `json:"capacity"`
	// Overload is the open-loop phase at OfferedTarget requests/s.
	Overload *PhaseReport `json:"overload"`
	Problems []string     `json:"problems"`
}

// PhaseReport is one phase's outcome. Latencies are from the moment a
// request was due to be sent (open loop: a late send counts against the
// server, as a real client's wait would), in microseconds.
type PhaseReport struct {
	Seconds       float64 `json:"seconds"`
	OfferedTarget float64 `json:"offeredTargetPerSecond,omitempty"`
	Sent          int64   `json:"sent"`
	// NotSent: due while MaxInflight requests were already waiting, so the
	// generator could not send them; the offered rate is Sent/Seconds.
	NotSent     int64   `json:"notSent,omitempty"`
	OfferedRate float64 `json:"offeredPerSecond"`
	Accepted    int64   `json:"accepted"` // 201 and 409 (seats taken or sold out)
	Refused     int64   `json:"refused429"`
	Timeouts    int64   `json:"timeouts"`
	Errors      int64   `json:"errors"` // any other status or transport error
	AcceptedPS  float64 `json:"acceptedPerSecond"`
	RefusedPct  float64 `json:"refusedPercent"`
	P50Us       int64   `json:"acceptedP50Us"`
	P99Us       int64   `json:"acceptedP99Us"`
	MaxUs       int64   `json:"acceptedMaxUs"`
	RefusedP99  int64   `json:"refusedP99Us"`
	SendLagP99  int64   `json:"sendLagP99Us,omitempty"` // how late the generator sent
	// SentP99Us and SentMaxUs: accepted latency from the moment the request
	// was actually sent, the server's share when the generator lags.
	SentP99Us int64 `json:"acceptedP99FromSendUs"`
	SentMaxUs int64 `json:"acceptedMaxFromSendUs"`
	// RetryAfter is false if any 429 came without a Retry-After header.
	RetryAfter   bool               `json:"retryAfterOnEvery429"`
	ServerCPU    *float64           `json:"serverCpuSeconds,omitempty"`
	GeneratorCPU float64            `json:"generatorCpuSeconds"`
	PeakRSSBytes *int64             `json:"serverPeakRssBytes,omitempty"`
	Shed         map[string]float64 `json:"serverShed,omitempty"` // surge_engine_shed_total during the phase
	// From the server's histograms over the phase, as bucket bounds: time
	// in the reservation handler (every answer) and in a partition's inbox.
	ServerHandlerP99Us *int64   `json:"serverHandlerP99Us,omitempty"`
	ServerQueueP99Us   *int64   `json:"serverQueueDelayP99Us,omitempty"`
	ErrorSamples       []string `json:"errorSamples,omitempty"`
}

// RunOverload measures one partition's capacity, then offers a multiple of
// it open-loop and reports what the accepted requests waited and how much
// was refused.
func RunOverload(ctx context.Context, o OverloadOptions) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := checkConn(o.Conn); err != nil {
		return err
	}
	ctx = withConn(ctx, o.Conn)
	rep := &OverloadReport{Benchmark: "overload", Target: o.Target, Areas: o.Areas, HTTP2: o.HTTP2, TimeoutSec: o.ClientTimeout.Seconds(), Problems: []string{}}
	rig, err := newRig(o.Options, "surge-overload-")
	if err != nil {
		return err
	}
	defer rig.cleanup()
	var extra []string
	if o.MaxQueueDelay != "" {
		extra = []string{"--max-queue-delay", o.MaxQueueDelay}
	}
	srv, err := rig.target(ctx, "", "surge-overload", "data", "overload", extra...)
	if err != nil {
		return err
	}
	if rep.Partitions, err = metricsPartitions(ctx, srv.base); err != nil {
		return fmt.Errorf("reading the partition count from %s/metrics: %w", srv.base, err)
	}
	l := newLoader(srv.base, o)
	defer l.close()
	if err := o.runPhases(ctx, l, srv.cpu(ctx), rep, rig.logf); err != nil {
		return err
	}
	rep.Overload.PeakRSSBytes = srv.peakRSS()
	if ctx.Err() != nil {
		return errors.New("interrupted; servers stopped")
	}
	if err := srv.stop(); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
	}
	return o.finish(rep)
}

func (o OverloadOptions) validate() error {
	if o.Areas < 1 || o.Multiple <= 0 || o.CapacitySeconds <= 0 || o.Seconds <= 0 || o.Concurrency < 1 || o.MaxInflight < 1 || o.Clients < 1 || o.ClientTimeout <= 0 {
		return errors.New("--areas, --multiple, --capacity-seconds, --seconds, --concurrency, --max-inflight, --clients and --client-timeout must all be positive")
	}
	return nil
}

// runPhases measures the capacity (closed loop) and then offers the
// overload (open loop) at a multiple of it, or at o.Rate.
func (o OverloadOptions) runPhases(ctx context.Context, l *loader, cpu func() (float64, error), rep *OverloadReport, logf func(string, ...any)) error {
	// Two events, so the overload phase starts on unsold seats; each has
	// its areas in one partition, the bottleneck.
	capEv, err := l.createEvent(ctx, o.Areas, rep.Partitions)
	if err != nil {
		return err
	}
	ovEv, err := l.createEvent(ctx, o.Areas, rep.Partitions)
	if err != nil {
		return err
	}
	logf("capacity: closed loop, %d in flight, %.0f s", o.Concurrency, o.CapacitySeconds)
	rep.Capacity = l.phase(ctx, capEv, cpu, func(p *phase) { p.closedLoop(ctx, o.Concurrency, secs(o.CapacitySeconds)) })
	rate := o.Rate
	if rate <= 0 {
		rate = o.Multiple * rep.Capacity.AcceptedPS
	}
	if rate <= 0 {
		return errors.New("capacity phase accepted nothing; see the server's log")
	}
	logf("capacity %s accepted/s; overload: open loop at %s requests/s for %.0f s (at most %d in flight, client timeout %s)",
		grouped(int64(rep.Capacity.AcceptedPS)), grouped(int64(rate)), o.Seconds, o.MaxInflight, o.ClientTimeout)
	rep.Overload = l.phase(ctx, ovEv, cpu, func(p *phase) { p.openLoop(ctx, rate, o.MaxInflight, secs(o.Seconds)) })
	rep.Overload.OfferedTarget = rate
	return nil
}

// finish prints the report, writes its JSON if asked, and fails the run
// if it found problems.
func (o OverloadOptions) finish(rep *OverloadReport) error {
	writeOverload(o.Stdout, rep)
	if o.JSONPath != "" {
		if err := writeAnyJSON(o.JSONPath, rep); err != nil {
			return err
		}
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%w: %s", ErrFailed, strings.Join(rep.Problems, "; "))
	}
	return nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

type loader struct {
	base    string
	clients []*http.Client
	next    atomic.Uint64
	timeout time.Duration
}

// newLoader makes o.Clients HTTP clients, each with its own connections.
func newLoader(base string, o OverloadOptions) *loader {
	clients := make([]*http.Client, o.Clients)
	for i := range clients {
		clients[i] = newHTTPClient(o.HTTP2, o.MaxInflight, o.Conn)
	}
	return &loader{base: base, clients: clients, timeout: o.ClientTimeout}
}

func (l *loader) close() {
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
}

type overloadEvent struct {
	id     string
	bodies [][]byte // one reservation body per area
}

// createEvent creates an event whose areas all live in the partition of
// its first area, so one partition is the bottleneck; parts is the
// server's partition count.
func (l *loader) createEvent(ctx context.Context, areas, parts int) (*overloadEvent, error) {
	ev := &overloadEvent{id: "overload-" + ids.New().String()}
	part := -1
	type area struct {
		AreaID   string `json:"areaId"`
		Price    int    `json:"price"`
		RowCount int    `json:"rowCount"`
		ColCount int    `json:"colCount"`
	}
	var def struct {
		EventName string `json:"eventName"`
		Areas     []area `json:"areas"`
	}
	def.EventName = ev.id
	for i := 0; len(def.Areas) < areas; i++ {
		id := "a" + strconv.Itoa(i)
		// The ticketing API's placement of (event, area).
		p := engine.PartitionOfHash(engine.HashMore(engine.HashMore(engine.Hash(ev.id), "\x00"), id), parts)
		if part < 0 {
			part = p
		}
		if p != part {
			continue
		}
		def.Areas = append(def.Areas, area{AreaID: id, Price: 100, RowCount: 1000, ColCount: 100})
		ev.bodies = append(ev.bodies, fmt.Appendf(nil, `{"userId":"overload","eventId":%q,"areaId":%q,"numOfSeats":1,"type":"RANDOM"}`, ev.id, id))
	}
	body, _ := json.Marshal(def)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.base+"/v1/event", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.clients[0].Do(req)
	if err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("create event: status %d: %s", resp.StatusCode, clip(reply))
	}
	return ev, nil
}

// phase runs one load pattern against ev and collects its outcome.
func (l *loader) phase(ctx context.Context, ev *overloadEvent, cpu func() (float64, error), run func(*phase)) *PhaseReport {
	p := &phase{l: l, ev: ev, acc: newHist(), ref: newHist(), lag: newHist(), fromSend: newHist(), retryAfter: true}
	m0, _ := scrape(ctx, l.base)
	m := meterCPU(cpu)
	start := time.Now()
	run(p)
	elapsed := time.Since(start)
	r := &PhaseReport{
		Seconds: elapsed.Seconds(), Sent: p.sent.Load(), NotSent: p.notSent.Load(),
		Accepted: p.accepted.Load(), Refused: p.refused.Load(), Timeouts: p.timeouts.Load(), Errors: p.errors.Load(),
		P50Us: p.acc.ValueAtQuantile(50), P99Us: p.acc.ValueAtQuantile(99), MaxUs: p.acc.Max(),
		SentP99Us: p.fromSend.ValueAtQuantile(99), SentMaxUs: p.fromSend.Max(),
		RefusedP99: p.ref.ValueAtQuantile(99), RetryAfter: p.retryAfter, GeneratorCPU: m.generator(),
		ErrorSamples: p.samples,
	}
	if p.lag.TotalCount() > 0 {
		r.SendLagP99 = p.lag.ValueAtQuantile(99)
	}
	r.OfferedRate = float64(r.Sent) / r.Seconds
	r.AcceptedPS = float64(r.Accepted) / r.Seconds
	if r.Sent > 0 {
		r.RefusedPct = 100 * float64(r.Refused) / float64(r.Sent)
	}
	if v, err := m.used(); err == nil {
		r.ServerCPU = &v
	}
	if m1, err := scrape(ctx, l.base); err == nil && m0 != nil {
		serverSide(r, m0, m1)
	}
	return r
}

type phase struct {
	l  *loader
	ev *overloadEvent

	sent, notSent, accepted, refused, timeouts, errors atomic.Int64

	mu            sync.Mutex
	acc, ref      *hdrhistogram.Histogram
	lag, fromSend *hdrhistogram.Histogram
	retryAfter    bool
	samples       []string
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatencyUs, 3) }

// closedLoop keeps n requests in flight for d; a 429 is retried after a
// short pause, as a client would.
func (p *phase) closedLoop(ctx context.Context, n int, d time.Duration) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for i := w; time.Now().Before(end) && ctx.Err() == nil; i += n {
				if st := p.one(ctx, i, time.Now()); st == http.StatusTooManyRequests {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

// openLoop sends requests at a constant rate for d whether or not earlier
// ones were answered (a crowd does not wait for each other), with at most
// maxInflight waiting at once.
func (p *phase) openLoop(ctx context.Context, rate float64, maxInflight int, d time.Duration) {
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	schedule(ctx, rate, d, func(i int64, at time.Time) {
		select {
		case sem <- struct{}{}:
			wg.Go(func() {
				defer func() { <-sem }()
				p.one(ctx, int(i), at)
			})
		default:
			p.notSent.Add(1)
		}
	})
	wg.Wait()
}

// one sends reservation i, due at at, and records its outcome; it returns
// the status (0 for a transport error or timeout).
func (p *phase) one(ctx context.Context, i int, at time.Time) int {
	p.sent.Add(1)
	sendAt := time.Now()
	body := p.ev.bodies[i%len(p.ev.bodies)]
	rctx, cancel := context.WithTimeout(ctx, p.l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.l.base+"/v2/reservations", bytes.NewReader(body))
	if err != nil {
		p.fail(err.Error())
		return 0
	}
	req.Header["Content-Type"] = []string{"application/json"}
	c := p.l.clients[p.l.next.Add(1)%uint64(len(p.l.clients))]
	resp, err := c.Transport.RoundTrip(req)
	status := 0
	if err == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReplyBytes))
		resp.Body.Close()
		status = resp.StatusCode
	}
	us := max(time.Since(at).Microseconds(), 1)
	if err != nil {
		switch {
		case ctx.Err() != nil: // the run was interrupted
		case rctx.Err() != nil:
			p.timeouts.Add(1)
		default:
			p.fail(err.Error())
		}
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.lag.RecordValue(max(sendAt.Sub(at).Microseconds(), 1))
	switch status {
	case http.StatusCreated, http.StatusConflict:
		p.accepted.Add(1)
		_ = p.acc.RecordValue(min(us, maxLatencyUs))
		_ = p.fromSend.RecordValue(min(max(time.Since(sendAt).Microseconds(), 1), maxLatencyUs))
	case http.StatusTooManyRequests:
		p.refused.Add(1)
		_ = p.ref.RecordValue(min(us, maxLatencyUs))
		if resp.Header.Get("Retry-After") == "" {
			p.retryAfter = false
		}
	default:
		p.errors.Add(1)
		if len(p.samples) < maxSamples {
			p.samples = append(p.samples, "status "+strconv.Itoa(status))
		}
	}
	return status
}

func (p *phase) fail(msg string) {
	p.errors.Add(1)
	p.mu.Lock()
	if len(p.samples) < maxSamples {
		p.samples = append(p.samples, msg)
	}
	p.mu.Unlock()
}

func writeOverload(w io.Writer, r *OverloadReport) {
	proto := "h2c"
	if !r.HTTP2 {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(w, "\noverload: native POST /v2/reservations, 1 seat, %d areas of one event in one of %d partitions, %s, client timeout %.0f s\n",
		r.Areas, r.Partitions, proto, r.TimeoutSec)
	for _, ph := range []struct {
		name string
		p    *PhaseReport
	}{{"capacity (closed loop)", r.Capacity}, {"overload (open loop)", r.Overload}} {
		p := ph.p
		if p == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s, %.1f s\n", ph.name, p.Seconds)
		if p.OfferedTarget > 0 {
			fmt.Fprintf(w, "  offered          %s/s (target %s/s; %s not sent: generator at its in-flight cap)\n",
				grouped(int64(p.OfferedRate)), grouped(int64(p.OfferedTarget)), grouped(p.NotSent))
		} else {
			fmt.Fprintf(w, "  sent             %s/s\n", grouped(int64(p.OfferedRate)))
		}
		fmt.Fprintf(w, "  accepted         %s/s (%s: 201 or 409)\n", grouped(int64(p.AcceptedPS)), grouped(p.Accepted))
		fmt.Fprintf(w, "  429              %s (%.1f %% of sent; Retry-After on every one: %v), p99 %s\n",
			grouped(p.Refused), p.RefusedPct, p.RetryAfter, micros(p.RefusedP99))
		fmt.Fprintf(w, "  timeouts, errors %s, %s\n", grouped(p.Timeouts), grouped(p.Errors))
		fmt.Fprintf(w, "  accepted latency p50 %s  p99 %s  max %s", micros(p.P50Us), micros(p.P99Us), micros(p.MaxUs))
		fmt.Fprintf(w, " (from when due)\n  from sending     p99 %s  max %s", micros(p.SentP99Us), micros(p.SentMaxUs))
		if p.SendLagP99 > 0 {
			fmt.Fprintf(w, "  (generator send lag p99 %s)", micros(p.SendLagP99))
		}
		fmt.Fprintln(w)
		if p.ServerHandlerP99Us != nil {
			fmt.Fprintf(w, "  server side      handler p99 ≤ %s", micros(*p.ServerHandlerP99Us))
			if p.ServerQueueP99Us != nil {
				fmt.Fprintf(w, ", partition queue delay p99 ≤ %s", micros(*p.ServerQueueP99Us))
			}
			fmt.Fprintln(w)
		}
		if p.ServerCPU != nil {
			fmt.Fprintf(w, "  server CPU       %.2f s; generator CPU %.2f s\n", *p.ServerCPU, p.GeneratorCPU)
		}
		if p.PeakRSSBytes != nil {
			fmt.Fprintf(w, "  server peak RSS  %d MB\n", *p.PeakRSSBytes>>20)
		}
		if len(p.Shed) > 0 {
			fmt.Fprintf(w, "  server shed      %v\n", p.Shed)
		}
		for _, s := range p.ErrorSamples {
			fmt.Fprintf(w, "  error sample     %s\n", s)
		}
	}
	for _, pr := range r.Problems {
		fmt.Fprintf(w, "PROBLEM: %s\n", pr)
	}
}

// metricsPartitions counts the surge_engine_inbox_depth gauges, one per
// partition, so the bench can place areas without being told the count.
func metricsPartitions(ctx context.Context, base string) (int, error) {
	m, err := scrape(ctx, base)
	if err != nil {
		return 0, err
	}
	n := m.count("surge_engine_inbox_depth")
	if n == 0 {
		return 0, errors.New("no surge_engine_inbox_depth gauges")
	}
	return n, nil
}

// The server histograms the bench reads, each a family and the labels of
// its series.
var (
	handlerHist = histSeries{"surge_http_request_seconds", []string{"route", "POST /v2/reservations"}}
	queueHist   = histSeries{"surge_engine_queue_delay_seconds", nil}
)

type histSeries struct {
	name   string
	labels []string
}

// serverSide fills in what the server's /metrics say of a phase, from
// scrapes before (m0) and after (m1) it: the p99 buckets of the handler
// and queue delay histograms, and surge_engine_shed_total by reason
// (absent on servers without admission by queue delay).
func serverSide(r *PhaseReport, m0, m1 metrics) {
	r.ServerHandlerP99Us = p99Delta(m0, m1, handlerHist)
	r.ServerQueueP99Us = p99Delta(m0, m1, queueHist)
	shed0, shed1 := m0.byLabel("surge_engine_shed_total", "reason"), m1.byLabel("surge_engine_shed_total", "reason")
	if len(shed1) == 0 {
		return
	}
	r.Shed = map[string]float64{}
	for k, v := range shed1 {
		r.Shed[k] = v - shed0[k]
	}
}

// p99Delta is the upper bound of the bucket holding the 99th percentile of
// what h observed between before and after, in microseconds; nil if
// nothing was, or the 99th percentile is past the last finite bucket.
func p99Delta(before, after metrics, h histSeries) *int64 {
	now, was := after.buckets(h.name, h.labels...), before.buckets(h.name, h.labels...)
	total := now[math.Inf(1)] - was[math.Inf(1)]
	if total <= 0 {
		return nil
	}
	for _, b := range slices.Sorted(maps.Keys(now)) {
		if math.IsInf(b, 1) {
			break
		}
		if now[b]-was[b] >= 0.99*total {
			us := int64(b * 1e6)
			return &us
		}
	}
	return nil
}
