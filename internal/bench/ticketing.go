package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Flow choices of `surge bench ticketing --flow`.
const FlowBoth = "both"

// TicketingOptions are the flags of `surge bench ticketing`.
type TicketingOptions struct {
	Areas        int
	Reservations int // per group
	Clients      int // per group
	Groups       int
	Inflight     int // across groups
	HTTP2        bool
	Flow         string // FlowCompat, FlowNative or FlowBoth
	Baseline     bool
	Seed         uint64
	// Cluster > 0 also runs each flow against that many `surge serve
	// --kafka` nodes on loopback, a fresh cluster name per flow.
	Cluster int
	// ClusterWarmup is how many unmeasured spikes run against throwaway
	// clusters before the first measured one: the broker is a JVM, and its
	// first thousands of transactions run before its JIT has compiled
	// them (a broker in service is warm).
	ClusterWarmup int
	// KafkaBrokers is the cluster's broker (host:port[,...]); empty: the
	// bench starts one with KafkaScript (default: scripts/kafka.sh found
	// above the binary or the working directory) and stops it at the end.
	KafkaBrokers string
	// KafkaPID is the java process of a broker given in KafkaBrokers, to
	// measure its CPU; 0: the broker's CPU is not measured.
	KafkaPID    int
	KafkaScript string
	Pprof       bool // the started servers serve /debug/pprof/
	// Crowd runs the peer's own spike client instead (crowd.go): every
	// reservation at once, with the peer's retries and deadlines.
	Crowd bool
	// CrowdTransport is the crowd's HTTP/2 client: CrowdTransportXNet (the
	// peer's) or CrowdTransportNetHTTP.
	CrowdTransport string
	// ServeArgs are extra flags for the started `surge serve` (not the
	// cluster's nodes).
	ServeArgs []string
	// KillAfter and KillAfterDecisions (crowd only, whichever comes
	// first; 0 for neither) kill the started server with SIGKILL that
	// long after the crowd's start or once that many reservations have
	// their decision, restart it on the same data dir and address, and
	// read back every id the crowd was given (crowd_crash.go).
	KillAfter          time.Duration
	KillAfterDecisions int64
	// ConsolePoll also runs each flow's spike against a second fresh
	// server while every page of the operator's console polls it
	// (console.go), and reports the server's CPU per reservation with
	// the console against without it.
	ConsolePoll bool
	// TraceCost also runs each flow's spike TraceCostRounds times against
	// fresh servers with tracing off, on at TraceCostRatio and on at 1,
	// the order turned each round (tracecost.go), and compares their CPU
	// per reservation.
	TraceCost       bool
	TraceCostRatio  float64
	TraceCostRounds int
	// Cores also runs each flow's spike on a fresh server pinned to each
	// of these numbers of CPUs in turn, the bench pinned to the CPUs
	// after them (cores.go), and compares their reservations per server
	// CPU-second with the first's.
	Cores []int
	// Rounds runs the server and the do-nothing server again in each
	// round after the first, the order turned each round (rounds.go);
	// the CPU goal judges the median of the rounds' own ratios. 0 is 1.
	Rounds int

	Options
}

// ErrFailed is returned when a run completed but found a problem that must
// fail it (double booking, errors, a server that would not start); the
// report says which.
var ErrFailed = errors.New("ticketing bench failed")

// RunTicketing runs the spike for each requested flow, against the real
// server and the do-nothing baseline, prints the report and writes the JSON.
func RunTicketing(ctx context.Context, o TicketingOptions) error {
	if err := o.checkTraceCost(); err != nil {
		return err
	}
	if err := o.checkCores(); err != nil {
		return err
	}
	if err := o.checkRounds(); err != nil {
		return err
	}
	if o.Crowd {
		return RunCrowd(ctx, o)
	}
	flows := []string{o.Flow}
	if o.Flow == FlowBoth {
		flows = []string{FlowCompat, FlowNative}
	} else if o.Flow != FlowCompat && o.Flow != FlowNative {
		return fmt.Errorf("--flow %q: want compat, native or both", o.Flow)
	}
	// Check the generator flags before starting any process.
	if _, err := NewGenerator(o.genConfig(flows[0], "http://127.0.0.1:1", false)); err != nil {
		return err
	}
	if o.ClusterWarmup < 0 {
		return fmt.Errorf("--cluster-warmup %d: want the number of warm-up spikes (0 for none)", o.ClusterWarmup)
	}
	if o.Cluster < 0 {
		return fmt.Errorf("--cluster %d: want the number of nodes (0 for none)", o.Cluster)
	}
	if o.Cluster > 0 && o.Target != "" {
		return errors.New("--cluster starts its own nodes; it does not combine with --target")
	}
	r := &ticketingRun{o: o, flows: flows, rep: &Report{Benchmark: "ticketing", Config: o.reportConfig()}}
	return runScenario(ctx, o.Options, "surge-bench-", r)
}

func (r *ticketingRun) setup(ctx context.Context, rig *Rig) error {
	r.Rig = rig
	rig.atExit = append(rig.atExit, func() {
		if err := r.broker.stop(); err != nil {
			r.logf("warning: %v", err)
		}
	})
	if r.o.Cluster > 0 {
		// The broker first: if there is none, say so before minutes of
		// spikes against the other servers.
		if _, err := r.brokerFor(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *ticketingRun) load(ctx context.Context, _ *Rig) error {
	for _, flow := range r.flows {
		fr, err := r.flow(ctx, flow)
		if fr != nil {
			fr.judge(r.o.Inflight)
			r.rep.Flows = append(r.rep.Flows, fr)
			r.rep.add(fr.Problems...)
			if fr.Server != nil {
				writeFlow(r.o.Stdout, r.rep.Config, fr)
			}
		}
		if err != nil {
			r.rep.add(err.Error())
			if ctx.Err() != nil {
				break
			}
		}
	}
	return nil
}

func (r *ticketingRun) judge(io.Writer)   {}
func (r *ticketingRun) report() any       { return r.rep }
func (r *ticketingRun) verdict() *Verdict { return &r.rep.Verdict }
func (r *ticketingRun) passed() string    { return "OK: no double booking, no errors" }
func (r *ticketingRun) failed() error     { return ErrFailed }

func (o TicketingOptions) genConfig(flow, baseURL string, check bool) GenConfig {
	return GenConfig{
		BaseURL: baseURL, Flow: flow, Areas: o.Areas, Reservations: o.Reservations,
		Clients: o.Clients, Groups: o.Groups, Inflight: o.Inflight, HTTP2: o.HTTP2,
		Conn: o.Conn, Seed: o.Seed, CheckSeats: check, Progress: o.Stderr, ProgressTTY: o.ProgressTTY,
	}
}

func (o TicketingOptions) reportConfig() ReportConfig {
	return ReportConfig{
		Areas: o.Areas, Reservations: o.Reservations, Clients: o.Clients, Groups: o.Groups,
		Inflight: o.Inflight, HTTP2: o.HTTP2, Flow: o.Flow, Baseline: o.Baseline,
		Target: o.Target, Partitions: o.Partitions, Seed: o.Seed, Cluster: o.Cluster,
	}
}

// ticketingRun is the ticketing spike scenario on its rig.
type ticketingRun struct {
	*Rig
	o      TicketingOptions
	flows  []string
	rep    *Report
	broker *kafkaBroker // the cluster target's, once known
	warmed bool         // the broker has served a warm-up spike
}

// flow runs one flow: the baseline against a fresh null server, then the
// spike against a fresh real server (or --target), then the restart.
func (r *ticketingRun) flow(ctx context.Context, flow string) (*FlowReport, error) {
	fr := &FlowReport{Flow: flow, Problems: []string{}}
	if r.o.Baseline {
		b, err := r.baseline(ctx, flow)
		if err != nil {
			return fr, fmt.Errorf("%s baseline: %w", flow, err)
		}
		if b.Errors > 0 {
			r.logf("warning: %s baseline had %d errors; its rate and p99 are not a clean ceiling", flow, b.Errors)
		}
		fr.Baseline = b
	}

	srv, err := r.target(ctx, flow, "surge-"+flow, "data-"+flow, flow, r.o.ServeArgs...)
	if err != nil {
		return fr, err
	}
	run, _, err := r.spike(ctx, flow, srv.base, nil, true, nil, srv.cpu(ctx))
	if err != nil {
		return fr, err
	}
	if srv.proc != nil {
		run.setPeakRSS(srv.proc, r.logf)
	}
	run.Server = srv.name(r.o.Options)
	fr.Server = run
	fr.Problems = append(fr.Problems, spikeProblems(flow, run)...)

	if srv.proc != nil {
		fr.Restart = r.restart(ctx, srv.proc, srv.args, run.Reservations)
		if fr.Restart.Error != "" {
			fr.Problems = append(fr.Problems, fmt.Sprintf("%s: restart: %s", flow, fr.Restart.Error))
		} else if fr.Restart.StopError != "" {
			fr.Problems = append(fr.Problems, fmt.Sprintf("%s: server did not exit 0 on SIGTERM: %s", flow, fr.Restart.StopError))
		}
	}

	fr.CPURounds = []CPURound{newCPURound(1, fr.Server, fr.Baseline, false)}
	if err := r.moreRounds(ctx, flow, fr); err != nil {
		return fr, err
	}

	if r.o.ConsolePoll {
		cr, err := r.consoleSpike(ctx, flow, run)
		if err != nil {
			return fr, fmt.Errorf("%s with the console: %w", flow, err)
		}
		fr.Console = cr
		fr.Problems = append(fr.Problems, spikeProblems(flow+" with the console", &cr.RunReport)...)
	}

	if r.o.TraceCost {
		tc, problems, err := r.traceCost(ctx, flow)
		fr.TraceCost = tc
		fr.Problems = append(fr.Problems, problems...)
		if err != nil {
			return fr, fmt.Errorf("%s tracing's cost: %w", flow, err)
		}
	}

	if len(r.o.Cores) > 0 {
		cr, problems, err := r.cores(ctx, flow)
		fr.Cores = cr
		fr.Problems = append(fr.Problems, problems...)
		if err != nil {
			return fr, fmt.Errorf("%s on pinned cores: %w", flow, err)
		}
	}

	if r.o.Cluster > 0 && !r.warmed {
		for i := range r.o.ClusterWarmup {
			r.logf("%s: warming the broker up: unmeasured spike %d of %d against a throwaway cluster", flow, i+1, r.o.ClusterWarmup)
			if _, err := r.cluster(ctx, flow, run); err != nil {
				return fr, fmt.Errorf("%s cluster warm-up: %w", flow, err)
			}
		}
		r.warmed = true
	}
	if r.o.Cluster > 0 {
		cr, err := r.cluster(ctx, flow, run)
		if err != nil {
			return fr, fmt.Errorf("%s cluster: %w", flow, err)
		}
		fr.Cluster = cr
		fr.Problems = append(fr.Problems, spikeProblems(flow+" cluster", &cr.RunReport)...)
	}
	return fr, nil
}

// spikeProblems are what fail a spike against a server: double booking,
// replies that break the seat contract, errors.
func spikeProblems(label string, run *RunReport) []string {
	var p []string
	if n := len(run.DoubleBookings); n > 0 {
		p = append(p, fmt.Sprintf("%s: DOUBLE BOOKING of %d seat(s)", label, n))
	}
	if run.Invalid > 0 {
		p = append(p, fmt.Sprintf("%s: %d reserved replies break the RANDOM seat contract", label, run.Invalid))
	}
	if run.Errors > 0 {
		p = append(p, fmt.Sprintf("%s: %d errors", label, run.Errors))
	}
	return p
}

func (r *ticketingRun) baseline(ctx context.Context, flow string) (*RunReport, error) {
	c, err := r.startNull(ctx, flow, "null-"+flow)
	if err != nil {
		return nil, err
	}
	defer c.kill()
	run, _, err := r.spike(ctx, flow, c.baseURL(), nil, false, nil, c.cpuSeconds)
	if err != nil {
		return nil, err
	}
	run.setPeakRSS(c, r.logf)
	run.Server = "null"
	r.stopNull(c)
	return run, nil
}

// spike creates the events, then measures the server's CPU around the
// spike alone, so event creation and connection set-up are not counted.
// Each of cpus reads one process's CPU time (a cluster has several); the
// run's server CPU is their sum, and their deltas come back one by one
// (nil where one could not be read, and then the sum is not set).
// With nodes, the clients spread over them; base still creates the events.
// mark, if set, is called just before and just after the spike, outside
// the CPU readings (to read counters around the same window).
func (r *ticketingRun) spike(ctx context.Context, flow, base string, nodes []string, check bool, mark func(), cpus ...func() (float64, error)) (*RunReport, []*float64, error) {
	cfg := r.o.genConfig(flow, base, check)
	cfg.Nodes = nodes
	cfg.Timeline = newTimeline(r.o.SampleInterval, sumCPU(cpus))
	cfg.Label = flow
	if !check {
		cfg.Label += " (do-nothing server)"
	}
	if len(nodes) > 0 {
		cfg.Label += fmt.Sprintf(" (cluster of %d)", len(nodes))
	}
	g, err := NewGenerator(cfg)
	if err != nil {
		return nil, nil, err
	}
	defer g.Close()
	if err := g.Setup(ctx); err != nil {
		return nil, nil, err
	}
	if mark != nil {
		mark()
	}
	cpu0 := make([]float64, len(cpus))
	errs := make([]error, len(cpus))
	for i, read := range cpus {
		cpu0[i], errs[i] = read()
	}
	stats, err := g.Spike(ctx)
	if err != nil {
		return nil, nil, err
	}
	run := &RunReport{Stats: *stats, Timeline: cfg.Timeline.points}
	defer func() {
		if mark != nil {
			mark()
		}
	}()
	deltas := make([]*float64, len(cpus))
	total, all := 0.0, true
	for i, read := range cpus {
		if errs[i] == nil {
			var cpu1 float64
			if cpu1, errs[i] = read(); errs[i] == nil {
				d := cpu1 - cpu0[i]
				deltas[i] = &d
				total += d
			}
		}
		if errs[i] != nil {
			all = false
			r.logf("warning: %s: server CPU not available: %v", cfg.Label, errs[i])
		}
	}
	if all && len(cpus) > 0 {
		run.setCPU(total)
	}
	r.logf("%s: %s reservations in %.3f s", cfg.Label, grouped(stats.Reservations), stats.Seconds)
	return run, deltas, nil
}

// restart measures recovery twice on the same data dir, timing each start
// until the health check answers (how long recovery keeps users waiting):
// first the hard case, kill -9 of the server that ran the spike (recovery
// loads snapshots and replays the log tail); then a graceful SIGTERM of the
// recovered server (which must exit 0) and a start after it.
func (r *ticketingRun) restart(ctx context.Context, srv *child, args []string, reservations int64) *RestartReport {
	rr := &RestartReport{Reservations: reservations}
	srv.kill()
	r.logf("restarting surge serve after kill -9")
	recovered, secs, err := r.timedStart(ctx, srv.name+"-after-kill", args, srv.addr)
	if err != nil {
		rr.Error = err.Error()
		return rr
	}
	defer recovered.kill()
	rr.KillReadySeconds = secs
	if _, rss, err := recovered.memory(); err == nil {
		rr.RSSAfterKillBytes = rss
	}

	t1 := time.Now()
	if err := recovered.stop(); err != nil {
		rr.StopError = err.Error()
	}
	rr.StopSeconds = time.Since(t1).Seconds()
	r.logf("restarting surge serve after SIGTERM")
	again, secs, err := r.timedStart(ctx, srv.name+"-restart", args, srv.addr)
	if err != nil {
		rr.Error = err.Error()
		return rr
	}
	defer again.kill()
	rr.ReadySeconds = secs
	if _, rss, err := again.memory(); err == nil {
		rr.RSSAfterRestartBytes = rss
	}
	if err := again.stop(); err != nil {
		r.logf("warning: restarted server: %v", err)
	}
	return rr
}
