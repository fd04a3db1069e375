package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// crowdCounterFamilies are the server's /metrics counters that say where
// its refusals came from; the report gives their change over the crowd.
var crowdCounterFamilies = []string{
	"surge_http_requests_refused_total",
	"surge_http_connections_refused_total",
	"surge_http_connections_shed_total",
	"surge_engine_shed_total",
	"surge_engine_dropped_inputs_total",
}

// CrowdReport is what `surge bench ticketing --crowd` measured; --json
// writes it.
type CrowdReport struct {
	Benchmark string     `json:"benchmark"`
	Config    CrowdShape `json:"config"`
	Baseline  *CrowdRun  `json:"baseline,omitempty"`
	Server    *CrowdRun  `json:"server,omitempty"`
	Verdict
	Machine MachineInfo `json:"machine"`
}

// CrowdShape is the crowd's configuration, the peer's rules included.
type CrowdShape struct {
	Groups              int      `json:"groups"`
	ReservationsPerGrp  int      `json:"reservationsPerGroup"`
	Areas               int      `json:"areasPerGroup"`
	ClientsPerGroup     int      `json:"clientsPerGroup"`
	Transport           string   `json:"clientTransport"`
	RetryMax            int      `json:"retryMax"`
	RetryWaitMinSeconds float64  `json:"retryWaitMinSeconds"`
	RetryWaitMaxSeconds float64  `json:"retryWaitMaxSeconds"`
	PostTimeoutSeconds  float64  `json:"postTimeoutSeconds"`
	GetTimeoutSeconds   float64  `json:"getTimeoutSeconds"`
	Target              string   `json:"target,omitempty"`
	ServeArgs           []string `json:"serveArgs,omitempty"`
	Seed                uint64   `json:"seed"`
	// The kill -9 mid-crowd, if any: seconds after the crowd's start,
	// or decisions seen, whichever comes first (0: not by that).
	KillAfterSeconds   float64 `json:"killAfterSeconds,omitempty"`
	KillAfterDecisions int64   `json:"killAfterDecisions,omitempty"`
}

// MachineInfo is what the figures depend on.
type MachineInfo struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpuModel"`
	LoadAvg  string `json:"loadAverageAtStart"`
}

// CrowdRun is one crowd against one server.
type CrowdRun struct {
	Server string `json:"server"` // "surge", "null" or the --target URL
	CrowdStats
	ServerCPUSeconds *float64 `json:"serverCpuSeconds"`
	// CPU per reservation that got an answer, and per request received
	// (refusals and retries included).
	CPUPerAnsweredMs *float64 `json:"serverCpuMsPerAnsweredReservation"`
	CPUPerRequestUs  *float64 `json:"serverCpuUsPerRequest"`
	PeakRSSBytes     *int64   `json:"serverPeakRssBytes,omitempty"`
	// RefusalCPUShare estimates the share of the server's CPU spent on
	// refusals: each refusal priced at what the do-nothing server spent
	// per request in the same invocation (a refusal does about as little:
	// a stream, a header, a short body); nil without that baseline.
	RefusalCPUShare *float64 `json:"serverCpuShareOnRefusalsEstimate,omitempty"`
	// ServerCounters is the change of the server's refusal counters over
	// the crowd, by series; nil when /metrics could not be read.
	ServerCounters map[string]float64 `json:"serverCounters,omitempty"`
}

func (r *CrowdRun) setCPU(cpu float64) {
	r.ServerCPUSeconds = &cpu
	if answered := r.Reserved + r.Failed; answered > 0 {
		v := 1e3 * cpu / float64(answered)
		r.CPUPerAnsweredMs = &v
	}
	if r.Requests > 0 {
		v := 1e6 * cpu / float64(r.Requests)
		r.CPUPerRequestUs = &v
	}
}

// estimateRefusalShare sets RefusalCPUShare from the do-nothing server's
// CPU per request.
func (r *CrowdRun) estimateRefusalShare(null *CrowdRun) {
	if null == nil || null.CPUPerRequestUs == nil || r.ServerCPUSeconds == nil || *r.ServerCPUSeconds <= 0 {
		return
	}
	v := float64(r.Refusals) * *null.CPUPerRequestUs / 1e6 / *r.ServerCPUSeconds
	r.RefusalCPUShare = &v
}

// RunCrowd runs the crowd against the do-nothing server (unless
// o.Baseline is false) and then against `surge serve` (or o.Target),
// prints the report and writes the JSON.
func RunCrowd(ctx context.Context, o TicketingOptions) error {
	cfg := o.crowdConfig("http://127.0.0.1:1", false)
	if o.Stderr != nil {
		o.Stderr = &syncWriter{w: o.Stderr}
	}
	if o.killing() {
		if o.Target != "" {
			return errors.New("a kill mid-crowd needs the server the bench starts: it takes no --target")
		}
		cfg.Kill = o.crowdKill(nil)
	}
	if _, err := newCrowd(cfg); err != nil {
		return err
	}
	rep := &CrowdReport{Benchmark: "ticketing-crowd", Config: o.crowdShape(), Machine: machineInfo()}
	return runScenario(ctx, o.Options, "surge-crowd-", &crowdBench{t: &ticketingRun{o: o}, rep: rep})
}

// crowdBench is the crowd scenario: the peer's spike client against the
// do-nothing server, then against surge (killed mid-crowd if asked).
type crowdBench struct {
	t   *ticketingRun
	rep *CrowdReport
}

func (b *crowdBench) setup(_ context.Context, rig *Rig) error {
	b.t.Rig = rig
	return nil
}

func (b *crowdBench) report() any       { return b.rep }
func (b *crowdBench) verdict() *Verdict { return &b.rep.Verdict }
func (b *crowdBench) failed() error     { return ErrFailed }
func (b *crowdBench) passed() string {
	if b.t.o.killing() {
		return "OK: no double booking, no errors; after kill -9 every id read back decided and unchanged"
	}
	return "OK: no double booking, no errors"
}

func (b *crowdBench) load(ctx context.Context, _ *Rig) error {
	var err error
	if b.t.o.Baseline {
		if b.rep.Baseline, err = b.t.crowdBaseline(ctx); err != nil {
			b.rep.add("baseline: " + err.Error())
		}
	}
	if ctx.Err() == nil {
		if b.rep.Server, err = b.t.crowdServer(ctx); err != nil {
			b.rep.add(err.Error())
		}
	}
	return nil
}

// judge adds the server run's problems and prints the whole report: the
// crowd's table has one column per server.
func (b *crowdBench) judge(out io.Writer) {
	if s := b.rep.Server; s != nil {
		s.estimateRefusalShare(b.rep.Baseline)
		if n := len(s.DoubleBookings); n > 0 {
			b.rep.add(fmt.Sprintf("DOUBLE BOOKING of %d seat(s)", n))
		}
		if s.Errors > 0 {
			b.rep.add(fmt.Sprintf("%d of %d reservations ended in an error (%.1f %%)", s.Errors, s.Reservations, s.ErrorPercent))
		}
		if s.Crash != nil {
			b.rep.add(s.Crash.Problems()...)
		}
	}
	b.rep.OK = len(b.rep.Problems) == 0
	writeCrowd(out, b.rep)
}

func (o TicketingOptions) killing() bool { return o.KillAfter != 0 || o.KillAfterDecisions != 0 }

func (o TicketingOptions) crowdKill(restart func(context.Context) (CrowdRestart, error)) *CrowdKill {
	if restart == nil {
		// Only checked, never called: the flags are judged before any
		// server starts.
		restart = func(context.Context) (CrowdRestart, error) { return CrowdRestart{}, errors.New("no server") }
	}
	return &CrowdKill{After: o.KillAfter, AfterDecisions: o.KillAfterDecisions, Restart: restart}
}

func (o TicketingOptions) crowdConfig(base string, check bool) CrowdConfig {
	return CrowdConfig{
		BaseURL: base, Groups: o.Groups, Reservations: o.Reservations, Areas: o.Areas,
		Clients: o.Clients, Seed: o.Seed, CheckSeats: check, Transport: o.crowdTransport(),
		PostTimeout: crowdPostTimeout, GetTimeout: crowdGetTimeout, Progress: o.Stderr,
	}
}

// crowdTransport is the crowd's client: the peer's HTTP/1.1 one when
// HTTP/2 is off, else the h2c transport asked for.
func (o TicketingOptions) crowdTransport() string {
	if !o.HTTP2 {
		return CrowdTransportHTTP1
	}
	return o.CrowdTransport
}

func (o TicketingOptions) crowdShape() CrowdShape {
	return CrowdShape{
		Groups: o.Groups, ReservationsPerGrp: o.Reservations, Areas: o.Areas, ClientsPerGroup: o.Clients, Transport: o.crowdTransport(),
		RetryMax: crowdRetryMax, RetryWaitMinSeconds: crowdRetryWaitMin.Seconds(), RetryWaitMaxSeconds: crowdRetryWaitMax.Seconds(),
		PostTimeoutSeconds: crowdPostTimeout.Seconds(), GetTimeoutSeconds: crowdGetTimeout.Seconds(),
		Target: o.Target, ServeArgs: o.ServeArgs, Seed: o.Seed,
		KillAfterSeconds: o.KillAfter.Seconds(), KillAfterDecisions: o.KillAfterDecisions,
	}
}

func (r *ticketingRun) crowdBaseline(ctx context.Context) (*CrowdRun, error) {
	c, err := r.startNull(ctx, "crowd", "null-crowd")
	if err != nil {
		return nil, err
	}
	defer c.kill()
	run, err := r.crowd(ctx, c.baseURL(), false, c.cpuSeconds, nil)
	if err != nil {
		return nil, err
	}
	run.Server = "null"
	run.PeakRSSBytes = peakOf(c)
	r.stopNull(c)
	return run, nil
}

func (r *ticketingRun) crowdServer(ctx context.Context) (*CrowdRun, error) {
	base, srv := r.o.Target, (*crowdProc)(nil)
	if base == "" {
		var err error
		if srv, err = r.startCrowdServer(ctx); err != nil {
			return nil, err
		}
		base = srv.baseURL()
	}
	cpu := func() (float64, error) {
		if srv != nil {
			return srv.cpuSeconds()
		}
		return metricsCPUSeconds(ctx, base)
	}
	var kill *CrowdKill
	if r.o.killing() {
		kill = r.o.crowdKill(srv.killAndRestart)
	}
	before, berr := scrapeCounters(ctx, base, crowdCounterFamilies)
	run, err := r.crowd(ctx, base, true, cpu, kill)
	if err != nil {
		return nil, err
	}
	run.Server = "surge"
	if r.o.Target != "" {
		run.Server = r.o.Target
	}
	after, aerr := scrapeCounters(ctx, base, crowdCounterFamilies)
	switch {
	case run.Crash != nil && run.Crash.Killed:
		r.logf("crowd: no refusal counters: the restarted server's counters start at zero")
	case berr == nil && aerr == nil:
		run.ServerCounters = counterDeltas(before, after)
	}
	if srv != nil {
		if peak, err := srv.peakRSS(); err == nil {
			run.PeakRSSBytes = &peak
		}
		if err := srv.cur().stop(); err != nil {
			r.logf("warning: surge serve did not exit cleanly: %v", err)
		}
	}
	return run, nil
}

// startCrowdServer starts `surge serve` on a fresh data dir for the crowd.
func (r *ticketingRun) startCrowdServer(ctx context.Context) (*crowdProc, error) {
	c, args, err := r.startServe(ctx, "crowd", "surge-crowd", "data-crowd", "crowd", r.o.ServeArgs...)
	if err != nil {
		return nil, err
	}
	return &crowdProc{r: r, args: args, now: c}, nil
}

// crowd runs one crowd against base, reading the server's CPU around the
// crowd alone (event creation and health checks excluded).
func (r *ticketingRun) crowd(ctx context.Context, base string, check bool, cpu func() (float64, error), kill *CrowdKill) (*CrowdRun, error) {
	cfg := r.o.crowdConfig(base, check)
	if strings.HasPrefix(base, "https://") {
		cfg.TLS = clientTLS(connOf(ctx))
	}
	cfg.Kill = kill
	cfg.Label = "crowd (surge)"
	if !check {
		cfg.Label = "crowd (do-nothing server)"
	}
	c, err := newCrowd(cfg)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.setup(ctx); err != nil {
		return nil, err
	}
	m := meterCPU(cpu)
	stats, err := c.run(ctx)
	if err != nil {
		return nil, err
	}
	run := &CrowdRun{CrowdStats: *stats}
	if used, ok := m.usedOrWarn(r.o.Stderr, cfg.Label); ok {
		run.setCPU(used)
	}
	r.logf("%s: %s reservations in %.1f s, %s errors", cfg.Label, grouped(stats.Reservations), stats.CompletionSeconds, grouped(stats.Errors))
	return run, nil
}

// scrapeCounters reads the series of the given families from /metrics.
func scrapeCounters(ctx context.Context, base string, families []string) (map[string]float64, error) {
	m, err := scrape(ctx, base)
	if err != nil {
		return nil, err
	}
	return m.series(families), nil
}

// counterDeltas keeps the series that changed.
func counterDeltas(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func machineInfo() MachineInfo {
	m := MachineInfo{CPUs: runtime.NumCPU()}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return m
	}
	if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
		m.CPUModel = cpus[0].ModelName
	}
	if l, err := fs.LoadAvg(); err == nil {
		m.LoadAvg = fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
	}
	return m
}

// writeCrowd prints the report as Markdown: one column per server.
func writeCrowd(w io.Writer, rep *CrowdReport) {
	writeCrowdHeader(w, rep)
	var runs []*CrowdRun
	header := "|"
	for _, r := range []*CrowdRun{rep.Baseline, rep.Server} {
		if r != nil {
			runs = append(runs, r)
			header += " " + r.Server + " |"
		}
	}
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "| | %s\n|---|%s\n", header[2:], strings.Repeat("---|", len(runs)))
	row := columns[*CrowdRun]{w: w, lead: "| ", sep: " | ", tail: " |", runs: runs}.row
	writeCrowdOutcomeRows(row)
	writeCrowdRequestRows(row)
	writeCrowdCostRows(row)
	for _, r := range runs {
		writeCrowdDetails(w, r)
	}
}

// writeCrowdHeader gives the crowd's shape, the peer's client rules and
// the machine.
func writeCrowdHeader(w io.Writer, rep *CrowdReport) {
	c := rep.Config
	proto := "h2c"
	if c.Transport == CrowdTransportHTTP1 {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(w, "\n## Flash crowd: %d × %s reservations at once, %d areas × 400 seats per group, %d %s clients (%s) per group\n\n",
		c.Groups, grouped(int64(c.ReservationsPerGrp)), c.Areas, c.ClientsPerGroup, proto, c.Transport)
	fmt.Fprintf(w, "The peer's client rules: up to %d retries of connection errors, 429 and 5xx; Retry-After honoured on 429/503, otherwise %g s × 2^n up to %g s; %g s per POST and %g s per GET, retries included.\n",
		c.RetryMax, c.RetryWaitMinSeconds, c.RetryWaitMaxSeconds, c.PostTimeoutSeconds, c.GetTimeoutSeconds)
	fmt.Fprintf(w, "Machine: %d CPUs, %s, load average at start %s.\n\n", rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.LoadAvg)
}

// writeCrowdOutcomeRows are how the reservations ended and when.
func writeCrowdOutcomeRows(row func(string, func(*CrowdRun) string)) {
	row("reservations", func(r *CrowdRun) string { return grouped(r.Reservations) })
	row("errors", func(r *CrowdRun) string { return fmt.Sprintf("%s (%.1f %%)", grouped(r.Errors), r.ErrorPercent) })
	row("reserved / failed (sold out)", func(r *CrowdRun) string { return grouped(r.Reserved) + " / " + grouped(r.Failed) })
	row("seats sold / offered", func(r *CrowdRun) string { return grouped(r.SeatsSold) + " / " + grouped(r.SeatsOffered) })
	row("double bookings", func(r *CrowdRun) string { return strconv.Itoa(len(r.DoubleBookings)) })
	row("completion", func(r *CrowdRun) string { return fmt.Sprintf("%.1f s", r.CompletionSeconds) })
	row("last seat sold at", func(r *CrowdRun) string { return fmt.Sprintf("%.1f s", r.LastSeatSoldSeconds) })
	row("latency p50 / p99 / max (answered)", func(r *CrowdRun) string {
		return micros(r.P50Us) + " / " + micros(r.P99Us) + " / " + micros(r.MaxUs)
	})
}

// writeCrowdRequestRows are the requests it took: retries, refusals,
// connections.
func writeCrowdRequestRows(row func(string, func(*CrowdRun) string)) {
	row("requests (POST + GET)", func(r *CrowdRun) string {
		return fmt.Sprintf("%s (%s + %s)", grouped(r.Requests), grouped(r.Posts), grouped(r.Gets))
	})
	row("retries", func(r *CrowdRun) string { return grouped(r.Retries) })
	row("refusals (% of requests)", func(r *CrowdRun) string {
		return fmt.Sprintf("%s (%.1f %%): %s", grouped(r.Refusals), r.RefusalPercent, countList(r.RefusalsByStatus))
	})
	row("Retry-After seen", func(r *CrowdRun) string { return countList(r.RetryAfter) })
	row("connections opened", func(r *CrowdRun) string { return grouped(r.Connections) })
}

// writeCrowdCostRows are the server's CPU and memory and the generator's
// CPU.
func writeCrowdCostRows(row func(string, func(*CrowdRun) string)) {
	row("server CPU", func(r *CrowdRun) string { return optFloat(r.ServerCPUSeconds, "%.1f s") })
	row("server CPU per answered reservation", func(r *CrowdRun) string { return optFloat(r.CPUPerAnsweredMs, "%.3f ms") })
	row("server CPU per request", func(r *CrowdRun) string { return optFloat(r.CPUPerRequestUs, "%.0f µs") })
	row("server CPU on refusals (estimate: each priced at the do-nothing server's CPU per request)", func(r *CrowdRun) string {
		if r.RefusalCPUShare == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.1f %%", 100**r.RefusalCPUShare)
	})
	row("server peak RSS", func(r *CrowdRun) string {
		if r.PeakRSSBytes == nil {
			return "n/a"
		}
		return mib(*r.PeakRSSBytes)
	})
	row("generator CPU", func(r *CrowdRun) string { return fmt.Sprintf("%.1f s", r.GeneratorCPUSeconds) })
}

// writeCrowdDetails lists one run's errors, refusal counters, double
// bookings and kill -9 under the table.
func writeCrowdDetails(w io.Writer, r *CrowdRun) {
	writeCountSection(w, fmt.Sprintf("Errors by kind (%s):", r.Server), r.ErrorsByKind)
	writeCountSection(w, fmt.Sprintf("Transport errors of single attempts, retried or not (%s):", r.Server), r.AttemptErrors)
	writeCountSection(w, fmt.Sprintf("Server refusal counters over the crowd (%s /metrics):", r.Server), r.ServerCounters)
	for _, d := range r.DoubleBookings {
		fmt.Fprintf(w, "- DOUBLE BOOKING (%s): %s\n", r.Server, d)
	}
	if r.Crash != nil {
		writeCrash(w, r.Server, r.Crash)
	}
}

// writeCountSection prints title and m's counts as a list, sorted by
// key; nothing when m is empty.
func writeCountSection[V int64 | float64](w io.Writer, title string, m map[string]V) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	for _, k := range sortedKeys(m) {
		fmt.Fprintf(w, "- %s: %s\n", k, grouped(int64(m[k])))
	}
}

// writeCrash prints the kill -9 mid-crowd and the read-back after it.
func writeCrash(w io.Writer, server string, k *CrowdCrash) {
	fmt.Fprintf(w, "\n### Kill -9 mid-crowd (%s), %s\n\n", server, k.Trigger)
	switch {
	case k.RestartError != "":
		fmt.Fprintf(w, "- killed at %.2f s; the restart FAILED: %s\n", k.KilledAtSeconds, k.RestartError)
		return
	case !k.Killed:
		fmt.Fprintln(w, "- NOT KILLED: the crowd ended before the trigger")
		return
	}
	fmt.Fprintf(w, "- killed at %.2f s, with %s decisions seen and %s ids handed out\n", k.KilledAtSeconds, grouped(k.DecisionsAtKill), grouped(k.IDsAtKill))
	recovery := "not logged"
	if k.RecoverySeconds >= 0 {
		recovery = fmt.Sprintf("%.2f s", k.RecoverySeconds)
	}
	fmt.Fprintf(w, "- restarted: healthy %.2f s after exec (engine recovery %s, %s records replayed)\n", k.RestartSeconds, recovery, grouped(k.ReplayedRecords))
	fmt.Fprintf(w, "- ids read back: %s (RESERVED %s, FAILED %s)\n", grouped(k.IDsChecked), grouped(k.ReadReserved), grouped(k.ReadFailed))
	fmt.Fprintf(w, "- lost (404): %s; unreadable: %s; changed answers: %s; wrong seats: %s; double bookings: %d\n",
		grouped(k.LostIDs), grouped(k.Unreadable), grouped(k.ChangedAnswers), grouped(k.WrongSeats), len(k.DoubleBookings))
	for _, s := range k.Samples {
		fmt.Fprintf(w, "- e.g. %s\n", s)
	}
	for _, d := range k.DoubleBookings {
		fmt.Fprintf(w, "- DOUBLE BOOKING after kill -9: %s\n", d)
	}
}

func optFloat(v *float64, format string) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf(format, *v)
}

// countList renders {"503": 10, "429": 3} as "429: 3, 503: 10".
func countList[V int64 | float64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range sortedKeys(m) {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", name, grouped(int64(m[k]))))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
