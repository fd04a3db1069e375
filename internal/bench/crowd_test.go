package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetryRulesAreRetryablehttpDefaults(t *testing.T) {
	r := peerRetryRules()
	ctx := context.Background()
	for status, want := range map[int]bool{200: false, 400: false, 404: false, 429: true, 500: true, 501: false, 502: true, 503: true, 0: true} {
		if got := r.shouldRetry(ctx, status, nil); got != want {
			t.Errorf("shouldRetry(%d) = %v, want %v", status, got, want)
		}
	}
	if !r.shouldRetry(ctx, 0, net.ErrClosed) {
		t.Error("a connection error must be retried")
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if r.shouldRetry(done, 503, nil) {
		t.Error("nothing is retried once the context is done")
	}

	// Exponential from WaitMin, capped at WaitMax.
	for attempt, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		if got := r.backoff(attempt, 500, ""); got != want*time.Second {
			t.Errorf("backoff(%d, 500) = %s, want %s", attempt, got, want*time.Second)
		}
	}
	if got := r.backoff(60, 502, ""); got != 30*time.Second {
		t.Errorf("backoff(60) = %s, want the cap", got)
	}
	// Retry-After wins on 429 and 503, uncapped; not on other 5xx.
	cases := []struct {
		status int
		ra     string
		want   time.Duration
	}{
		{429, "3", 3 * time.Second},
		{503, "0", 0},
		{503, "120", 120 * time.Second},
		{500, "3", 4 * time.Second},
		{429, "-1", 4 * time.Second},
		{429, "soon", 4 * time.Second},
	}
	for _, c := range cases {
		if got := r.backoff(2, c.status, c.ra); got != c.want {
			t.Errorf("backoff(2, %d, %q) = %s, want %s", c.status, c.ra, got, c.want)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if d, ok := parseRetryAfter(now.Add(7*time.Second).Format(http.TimeFormat), now); !ok || d != 7*time.Second {
		t.Errorf("HTTP-date Retry-After: %s %v, want 7s", d, ok)
	}
	if d, ok := parseRetryAfter(now.Add(-time.Hour).Format(http.TimeFormat), now); !ok || d != 0 {
		t.Errorf("past HTTP-date Retry-After: %s %v, want 0 true", d, ok)
	}
}

// refusing answers the first `refuse` reservation POSTs with status and
// Retry-After, then passes everything to next.
func refusing(next http.Handler, refuse int64, status int, retryAfter string) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/reservation") && n.Add(1) <= refuse {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			http.Error(w, `{"error":"busy"}`, status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func runCrowd(t *testing.T, cfg CrowdConfig) *CrowdStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if cfg.Groups == 0 {
		cfg.Groups, cfg.Reservations, cfg.Areas, cfg.Clients = 2, 200, 1, 2
	}
	if cfg.PostTimeout == 0 {
		cfg.PostTimeout, cfg.GetTimeout = 20*time.Second, 20*time.Second
	}
	c, err := newCrowd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.setup(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := c.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fastRules are the peer's rules with waits short enough for a test.
var fastRules = retryRules{Max: crowdRetryMax, WaitMin: time.Millisecond, WaitMax: 5 * time.Millisecond}

func TestCrowdRetriesRefusalsAndCountsThem(t *testing.T) {
	h := newFakeTicketing().handler()
	h = refusing(h, 150, http.StatusServiceUnavailable, "0")
	h = refusing(h, 100, http.StatusTooManyRequests, "0")
	h = refusing(h, 50, http.StatusInternalServerError, "")
	s := runCrowd(t, CrowdConfig{BaseURL: serve(t, h), CheckSeats: true, rules: fastRules})

	if s.Errors != 0 || s.Reservations != 400 {
		t.Fatalf("errors %d of %d reservations, want 0 of 400: %v %v", s.Errors, s.Reservations, s.ErrorsByKind, s.ErrorSamples)
	}
	want := map[string]int64{"500": 50, "429": 100, "503": 150}
	for k, v := range want {
		if s.RefusalsByStatus[k] != v {
			t.Errorf("refusals %s = %d, want %d (all: %v)", k, s.RefusalsByStatus[k], v, s.RefusalsByStatus)
		}
	}
	if s.Refusals != 300 || s.Retries != 300 || s.Posts != 700 || s.Gets != 400 || s.Requests != 1100 {
		t.Errorf("refusals %d retries %d posts %d gets %d requests %d, want 300 300 700 400 1100",
			s.Refusals, s.Retries, s.Posts, s.Gets, s.Requests)
	}
	if s.RetryAfter["0"] != 250 || s.RetryAfter[""] != 50 {
		t.Errorf("Retry-After seen %v, want 0: 250 and none: 50", s.RetryAfter)
	}
	if s.SeatsOffered != 800 || s.SeatsSold < 1 || s.SeatsSold > 800 || s.Reserved+s.Failed != 400 || len(s.DoubleBookings) != 0 {
		t.Errorf("seats %d of %d, reserved %d failed %d, double %v", s.SeatsSold, s.SeatsOffered, s.Reserved, s.Failed, s.DoubleBookings)
	}
}

// A Retry-After of an hour must make the client wait it out, so its 300 ms
// deadline ends each POST: had it used its own 1 ms backoff instead, the
// refusals would run out and the fake would have served it.
func TestCrowdHonoursRetryAfterAndCountsTheDeadline(t *testing.T) {
	h := refusing(newFakeTicketing().handler(), 10, http.StatusTooManyRequests, "3600")
	s := runCrowd(t, CrowdConfig{
		BaseURL: serve(t, h), CheckSeats: true, rules: fastRules,
		Groups: 1, Reservations: 10, Areas: 1, Clients: 1,
		PostTimeout: 300 * time.Millisecond, GetTimeout: time.Second,
	})
	if s.Errors != 10 || s.ErrorsByKind["POST deadline exceeded"] != 10 {
		t.Fatalf("errors %d by kind %v, want 10 POST deadline exceeded", s.Errors, s.ErrorsByKind)
	}
	if s.Posts != 10 || s.Retries != 0 || s.RetryAfter["3600"] != 10 {
		t.Errorf("posts %d retries %d Retry-After %v, want 10 posts, none retried, 10 × 3600", s.Posts, s.Retries, s.RetryAfter)
	}
	if s.ErrorPercent != 100 {
		t.Errorf("error percent %.1f, want 100", s.ErrorPercent)
	}
}

func TestCrowdGivesUpAfterRetryMax(t *testing.T) {
	h := refusing(newFakeTicketing().handler(), 1<<30, http.StatusServiceUnavailable, "")
	s := runCrowd(t, CrowdConfig{BaseURL: serve(t, h), CheckSeats: true, rules: fastRules,
		Groups: 1, Reservations: 5, Areas: 1, Clients: 1})
	kind := "POST gave up after 21 attempts (last: status 503)"
	if s.Errors != 5 || s.ErrorsByKind[kind] != 5 {
		t.Fatalf("errors %v, want 5 × %q", s.ErrorsByKind, kind)
	}
	if s.Posts != 5*21 || s.Retries != 5*20 {
		t.Errorf("posts %d retries %d, want 105 and 100", s.Posts, s.Retries)
	}
}

func TestCrowdRetriesConnectionErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c, err := newCrowd(CrowdConfig{BaseURL: "http://" + addr, Groups: 1, Reservations: 3, Areas: 1, Clients: 1,
		PostTimeout: 10 * time.Second, GetTimeout: 10 * time.Second,
		rules: retryRules{Max: 2, WaitMin: time.Millisecond, WaitMax: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	s, err := c.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kind := "POST gave up after 3 attempts (last: connection refused)"
	if s.AttemptErrors["connection refused"] != 9 {
		t.Errorf("attempt errors %v, want 9 connection refused", s.AttemptErrors)
	}
	if s.ErrorsByKind[kind] != 3 || s.Posts != 9 {
		t.Errorf("errors %v, posts %d; want 3 × %q and 9 posts", s.ErrorsByKind, s.Posts, kind)
	}
}

func TestCrowdReportsDoubleBooking(t *testing.T) {
	f := newFakeTicketing()
	f.doubleBook = true
	s := runCrowd(t, CrowdConfig{BaseURL: serve(t, f.handler()), CheckSeats: true, rules: fastRules,
		Groups: 1, Reservations: 20, Areas: 1, Clients: 2})
	if len(s.DoubleBookings) == 0 {
		t.Fatal("a server that sells seat (0,0) twenty times must be reported")
	}
	if d := s.DoubleBookings[0]; d.Seat != (Seat{Row: 0, Col: 0}) || d.Times != 20 {
		t.Errorf("first double booking %v, want seat 0,0 reserved 20 times", d)
	}
}

func TestCrowdReportFields(t *testing.T) {
	f := newFakeTicketing()
	f.doubleBook = true
	h := refusing(f.handler(), 5, http.StatusTooManyRequests, "0")
	s := runCrowd(t, CrowdConfig{BaseURL: serve(t, h), CheckSeats: true, rules: fastRules,
		Groups: 1, Reservations: 10, Areas: 1, Clients: 1})
	run := &CrowdRun{Server: "surge", CrowdStats: *s, ServerCounters: map[string]float64{`surge_engine_shed_total{reason="queue_delay"}`: 5}}
	run.setCPU(0.5)
	rep := &CrowdReport{Benchmark: "ticketing-crowd", Config: TicketingOptions{Groups: 1, Reservations: 10, Areas: 1, Clients: 1, CrowdTransport: CrowdTransportXNet}.crowdShape(),
		Server: run, Verdict: Verdict{Problems: []string{}}, Machine: machineInfo()}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	srv := got["server"].(map[string]any)
	for _, k := range []string{"errors", "errorsByKind", "completionSeconds", "requests", "retries", "refusalsByStatus",
		"retryAfter", "seatsSold", "seatsOffered", "doubleBookings", "serverCpuSeconds",
		"serverCpuMsPerAnsweredReservation", "serverCpuUsPerRequest", "serverCounters", "attemptErrorsByKind"} {
		if _, ok := srv[k]; !ok {
			t.Errorf("JSON server run has no %q", k)
		}
	}
	if cfg := got["config"].(map[string]any); cfg["retryMax"] != float64(20) || cfg["postTimeoutSeconds"] != float64(30) {
		t.Errorf("config %v: want the peer's retryMax 20 and 30 s POST deadline", cfg)
	}
	var md bytes.Buffer
	writeCrowd(&md, rep)
	for _, want := range []string{"| errors |", "| seats sold / offered |", "429: 5", "Retry-After seen | 0: 5", "DOUBLE BOOKING", "queue_delay", "| server CPU | 0.5 s |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown report lacks %q:\n%s", want, md.String())
		}
	}
}

func TestParseCountersAndDeltas(t *testing.T) {
	text := "# HELP x\nsurge_engine_shed_total{reason=\"expired\"} 3\nsurge_engine_shed_total{reason=\"queue_delay\"} 10\n" +
		"surge_http_requests_refused_total 7\nother_total 9\n"
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	before := m.series(crowdCounterFamilies)
	if len(before) != 3 || before["surge_http_requests_refused_total"] != 7 {
		t.Fatalf("parsed %v", before)
	}
	after := map[string]float64{`surge_engine_shed_total{reason="expired"}`: 3, `surge_engine_shed_total{reason="queue_delay"}`: 15, "surge_http_requests_refused_total": 7}
	d := counterDeltas(before, after)
	if len(d) != 1 || d[`surge_engine_shed_total{reason="queue_delay"}`] != 5 {
		t.Errorf("deltas %v, want only queue_delay +5", d)
	}
}

func TestCrowdAreasKeepThePeersRatio(t *testing.T) {
	for n, want := range map[int]int{200_000: 80, 20_000: 8, 8_000: 3, 10: 1} {
		if got := CrowdAreas(n); got != want {
			t.Errorf("CrowdAreas(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestRefusalShareIsPricedAtTheNullRequest: the refusal share prices each
// refusal at the do-nothing server's CPU per request of the same run.
func TestRefusalShareIsPricedAtTheNullRequest(t *testing.T) {
	null := &CrowdRun{Server: "null", CrowdStats: CrowdStats{Requests: 1000}}
	null.setCPU(0.04) // 40 µs per request
	srv := &CrowdRun{Server: "surge", CrowdStats: CrowdStats{Requests: 3000, Refusals: 1000}}
	srv.setCPU(0.2)
	srv.estimateRefusalShare(null)
	if srv.RefusalCPUShare == nil || math.Abs(*srv.RefusalCPUShare-0.2) > 1e-9 {
		t.Fatalf("share %v; want 0.2 (1,000 refusals × 40 µs of 0.2 s)", srv.RefusalCPUShare)
	}
	bare := &CrowdRun{Server: "surge", CrowdStats: CrowdStats{Requests: 10, Refusals: 5}}
	bare.setCPU(0.1)
	bare.estimateRefusalShare(nil)
	if bare.RefusalCPUShare != nil {
		t.Fatal("a share without a do-nothing run to price it")
	}
}

// TestCrowdOverHTTP1: with the peer's HTTP/1.1 client every request
// arrives over HTTP/1.1, and the crowd completes like the h2c one.
func TestCrowdOverHTTP1(t *testing.T) {
	var h2 atomic.Int64
	fake := newFakeTicketing().handler()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 {
			h2.Add(1)
		}
		fake.ServeHTTP(w, r)
	})
	s := runCrowd(t, CrowdConfig{BaseURL: serve(t, h), CheckSeats: true, rules: fastRules, Transport: CrowdTransportHTTP1})
	if s.Errors != 0 || s.Reserved+s.Failed != 400 || len(s.DoubleBookings) != 0 {
		t.Fatalf("errors %d (%v), reserved %d failed %d, double %v", s.Errors, s.ErrorsByKind, s.Reserved, s.Failed, s.DoubleBookings)
	}
	if n := h2.Load(); n != 0 {
		t.Errorf("%d requests came over HTTP/2, want every one over HTTP/1.1", n)
	}
}
