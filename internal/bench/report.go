package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Goals the ticketing bench judges itself against (docs/BENCHMARKS.md gives
// the peer's figures beside them).
const (
	goalCompatPerCPUSecond = 20_000
	goalNativePerCPUSecond = 40_000
	peerPerCPUSecond       = 265 // ≈ 84,745 reservations/s on ≈ 320 vCPU
	goalRatePercent        = 80
	goalP99Multiple        = 1.5
	goalInflight           = 256
	goalRestartSeconds     = 3
	goalRestartCommands    = 1_000_000
	// The cluster target's goals, beside embedded in one run.
	goalClusterCPUMultiple = 3
	goalClusterP99Ms       = 100
)

// Report is everything `surge bench ticketing` measured; --json writes it.
type Report struct {
	Benchmark string        `json:"benchmark"`
	Config    ReportConfig  `json:"config"`
	Flows     []*FlowReport `json:"flows"`
	Verdict
}

// ReportConfig records the flags a run used.
type ReportConfig struct {
	Areas        int    `json:"areas"`
	Reservations int    `json:"reservationsPerGroup"`
	Clients      int    `json:"clientsPerGroup"`
	Groups       int    `json:"groups"`
	Inflight     int    `json:"inflight"`
	HTTP2        bool   `json:"http2"`
	Flow         string `json:"flow"`
	Baseline     bool   `json:"baseline"`
	Target       string `json:"target,omitempty"`
	Partitions   int    `json:"partitions,omitempty"`
	Seed         uint64 `json:"seed"`
	Cluster      int    `json:"clusterNodes,omitempty"`
}

// FlowReport is one flow against the server and, if run, the do-nothing
// baseline.
type FlowReport struct {
	Flow     string     `json:"flow"`
	Server   *RunReport `json:"server"`
	Baseline *RunReport `json:"baseline,omitempty"`
	// RatePercent is the server's reservations/s as a percentage of the
	// baseline's; P99Multiple the server's p99 over the baseline's.
	RatePercent *float64       `json:"ratePercentOfBaseline,omitempty"`
	P99Multiple *float64       `json:"p99MultipleOfBaseline,omitempty"`
	Restart     *RestartReport `json:"restart,omitempty"`
	// Cluster is the same spike against a cluster (--cluster N).
	Cluster *ClusterReport `json:"cluster,omitempty"`
	// Console is the same spike while the console polls every page
	// (--console-poll).
	Console *ConsoleReport `json:"console,omitempty"`
	// TraceCost is the spike with tracing off and on, in rounds
	// (--trace-cost).
	TraceCost *TraceCostReport `json:"traceCost,omitempty"`
	// CPURounds compare the server's CPU per reservation with the
	// do-nothing server's, round by round (round 1: Server and Baseline;
	// more with --rounds); CPUMultiple is the median of their ratios.
	CPURounds   []CPURound `json:"cpuRounds,omitempty"`
	CPUMultiple *float64   `json:"cpuMultipleOfBaseline,omitempty"`
	// Cores is the spike on servers pinned to each count of --cores.
	Cores    *CoresReport `json:"cores,omitempty"`
	Goals    []Goal       `json:"goals"`
	Problems []string     `json:"problems"`
}

// RunReport is one spike against one server.
type RunReport struct {
	Server string `json:"server"` // "surge", "null" or the --target URL
	Stats
	// ServerCPUSeconds is nil when the server's CPU could not be read.
	ServerCPUSeconds         *float64 `json:"serverCpuSeconds"`
	ReservationsPerCPUSecond *float64 `json:"reservationsPerServerCpuSecond"`
	// PeakRSSBytes is the server's peak resident memory (VmHWM) after the
	// spike, set up included; nil for a server the bench did not start.
	PeakRSSBytes *int64 `json:"serverPeakRssBytes,omitempty"`
	// Timeline is the spike second by second (timeline.go), for the charts.
	Timeline []TimelinePoint `json:"timeline,omitempty"`
}

// RestartReport is the stop and restart of a server the bench started.
type RestartReport struct {
	// KillReadySeconds: start to first 200 after kill -9 of the server that
	// ran the spike (snapshots plus log replay).
	KillReadySeconds float64 `json:"readyAfterKillSeconds"`
	StopSeconds      float64 `json:"stopSeconds"`
	StopError        string  `json:"stopError,omitempty"` // empty when it exited 0 on SIGTERM
	ReadySeconds     float64 `json:"readySeconds"`        // process start to first 200 from /v1/health_check
	// Reservations is how many reservations the server had logged before
	// the restart; the restart goal is stated for a million commands.
	Reservations int64 `json:"reservationsBefore"`
	// RSSAfterKillBytes and RSSAfterRestartBytes: resident memory of the
	// recovered server as soon as it is ready (the state it rebuilt).
	RSSAfterKillBytes    int64  `json:"rssAfterKillBytes,omitempty"`
	RSSAfterRestartBytes int64  `json:"rssAfterRestartBytes,omitempty"`
	Error                string `json:"error,omitempty"`
}

// Goal is one performance goal and whether this run met it. Met is nil
// when the run could not measure it.
type Goal struct {
	Name   string   `json:"name"`
	Target string   `json:"target"`
	Value  *float64 `json:"value"`
	Unit   string   `json:"unit"`
	Met    *bool    `json:"met"`
	Note   string   `json:"note,omitempty"`
}

func (r *RunReport) setCPU(cpu float64) {
	r.ServerCPUSeconds = &cpu
	if cpu > 0 {
		v := float64(r.Reservations) / cpu
		r.ReservationsPerCPUSecond = &v
	}
}

// judge fills in the comparisons and goals once the runs are done.
func (f *FlowReport) judge(inflight int) {
	s, b := f.Server, f.Baseline
	if s != nil && b != nil && b.PerSecond > 0 && b.P99Us > 0 {
		r := 100 * s.PerSecond / b.PerSecond
		m := float64(s.P99Us) / float64(b.P99Us)
		f.RatePercent, f.P99Multiple = &r, &m
	}
	perCPU := float64(goalCompatPerCPUSecond)
	if f.Flow == FlowNative {
		perCPU = goalNativePerCPUSecond
	}
	var cpuValue *float64
	if s != nil {
		cpuValue = s.ReservationsPerCPUSecond
	}
	at := ""
	if inflight != goalInflight {
		at = fmt.Sprintf("goal is stated at %d in flight; this run had %d", goalInflight, inflight)
	}
	f.Goals = []Goal{
		goal("reservations per server CPU-second", "≥ "+grouped(int64(perCPU)), "/cpu-s", cpuValue,
			func(v float64) bool { return v >= perCPU }, fmt.Sprintf("peer ≈ %d", peerPerCPUSecond)),
		goal("rate vs do-nothing server", fmt.Sprintf("≥ %d %%", goalRatePercent), "%", f.RatePercent,
			func(v float64) bool { return v >= goalRatePercent }, at),
		goal("p99 vs do-nothing server", fmt.Sprintf("≤ %.1f×", goalP99Multiple), "×", f.P99Multiple,
			func(v float64) bool { return v <= goalP99Multiple }, at),
	}
	if g := f.cpuGoal(); g != nil {
		f.Goals = append(f.Goals, *g)
	}
	if c := f.Cluster; c != nil {
		note := fmt.Sprintf("%d nodes + broker", len(c.Nodes))
		if c.BrokerNote != "" {
			note = c.BrokerNote
		}
		p99 := float64(c.P99Us) / 1e3
		f.Goals = append(f.Goals,
			goal("cluster CPU per reservation vs embedded", fmt.Sprintf("≤ %d×", goalClusterCPUMultiple), "×", c.MultipleOfEmbedded,
				func(v float64) bool { return v <= goalClusterCPUMultiple }, note),
			goal("cluster p99", fmt.Sprintf("< %d ms", goalClusterP99Ms), "ms", &p99,
				func(v float64) bool { return v < goalClusterP99Ms }, ""))
	}
	if t := f.TraceCost; t != nil {
		f.Goals = append(f.Goals, t.goals()...)
	}
	if c := f.Cores; c != nil {
		f.Goals = append(f.Goals, c.goal()...)
	}
	if r := f.Restart; r != nil {
		var v *float64
		if r.Error == "" {
			worst := max(r.KillReadySeconds, r.ReadySeconds) // the kill -9 start is the hard case
			v = &worst
		}
		f.Goals = append(f.Goals, goal("restart ready (worst of kill -9, SIGTERM)", fmt.Sprintf("< %d s", goalRestartSeconds), "s", v,
			func(v float64) bool { return v < goalRestartSeconds },
			fmt.Sprintf("goal is after %s logged commands; this run logged %s reservations",
				grouped(goalRestartCommands), grouped(r.Reservations))))
	}
}

func goal(name, target, unit string, v *float64, ok func(float64) bool, note string) Goal {
	g := Goal{Name: name, Target: target, Value: v, Unit: unit, Note: note}
	if v != nil {
		met := ok(*v)
		g.Met = &met
	}
	return g
}

var flowTitles = map[string]string{
	FlowCompat: "compatibility flow (POST /v1/event/{id}/reservation, then GET /v1/reservation/{id})",
	FlowNative: "native flow (POST /v2/reservations, one round trip)",
}

// writeFlow prints one flow's results as a table.
func writeFlow(out io.Writer, c ReportConfig, f *FlowReport) {
	writeFlowHeader(out, c, f.Flow)
	runs := f.runs()
	writeFlowTable(out, f, runs)
	checked := runs[:len(runs)-btoi(f.Baseline != nil)]
	for _, s := range checked {
		writeSeats(out, s, len(checked) > 1)
	}
	if f.Restart != nil {
		writeRestart(out, f.Restart)
	}
	writeCPURounds(out, f.CPURounds)
	if f.Cluster != nil {
		writeCluster(out, f.Cluster)
	}
	if f.Console != nil {
		writeConsole(out, f.Server, f.Console)
	}
	if f.TraceCost != nil {
		writeTraceCost(out, f.TraceCost)
	}
	if f.Cores != nil {
		writeCores(out, f.Cores)
	}
	writeSamples(out, runs)
	fmt.Fprintln(out)
	writeFlowGoals(out, f.Goals)
	for _, p := range f.Problems {
		fmt.Fprintf(out, "PROBLEM: %s\n", p)
	}
}

func writeFlowHeader(out io.Writer, c ReportConfig, flow string) {
	proto := "HTTP/2 (h2c, prior knowledge)"
	if !c.HTTP2 {
		proto = "HTTP/1.1"
	}
	fmt.Fprintf(out, "\n== surge bench ticketing: %s ==\n", flowTitles[flow])
	fmt.Fprintf(out, "%d group(s) x %s reservations, %d areas x %d seats per event, %d clients per group, %d in flight, %s, seed %d\n\n",
		c.Groups, grouped(int64(c.Reservations)), c.Areas, gridRows*gridCols, c.Clients, c.Inflight, proto, c.Seed)
}

// runs are the table's columns: the server, the cluster, the baseline
// (the runs that were made, in that order).
func (f *FlowReport) runs() []*RunReport {
	runs := []*RunReport{f.Server}
	if f.Cluster != nil {
		runs = append(runs, &f.Cluster.RunReport)
	}
	if f.Baseline != nil {
		runs = append(runs, f.Baseline)
	}
	return runs
}

// writeFlowTable prints the runs side by side, a column each.
func writeFlowTable(out io.Writer, f *FlowReport, runs []*RunReport) {
	head := ""
	for _, r := range runs {
		if r == f.Baseline {
			head += "\tdo-nothing server"
		} else {
			head += "\t" + serverName(r)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, head)
	row := columns[*RunReport]{w: tw, sep: "\t", runs: runs}.row
	writeSpikeRows(row)
	writeServerCostRows(row, f.Cluster)
	row("generator CPU (user+sys)", func(r *RunReport) string { return fmt.Sprintf("%.2f s", r.GeneratorCPUSeconds) })
	tw.Flush()
}

// writeSpikeRows are what the generator counted and timed.
func writeSpikeRows(row func(string, func(*RunReport) string)) {
	row("completion time", func(r *RunReport) string { return fmt.Sprintf("%.3f s", r.Seconds) })
	row("reservations/s", func(r *RunReport) string { return grouped(int64(r.PerSecond + 0.5)) })
	row("reservations", func(r *RunReport) string { return grouped(r.Reservations) })
	row("  successes", func(r *RunReport) string { return grouped(r.Successes) })
	row("  failures (not available)", func(r *RunReport) string { return grouped(r.Failures) })
	row("  errors", func(r *RunReport) string { return grouped(r.Errors) })
	row("  invalid replies", func(r *RunReport) string { return grouped(r.Invalid) })
	row("retries", func(r *RunReport) string { return grouped(r.Retries) })
	row("latency p50", func(r *RunReport) string { return micros(r.P50Us) })
	row("latency p95", func(r *RunReport) string { return micros(r.P95Us) })
	row("latency p99", func(r *RunReport) string { return micros(r.P99Us) })
	row("latency max", func(r *RunReport) string { return micros(r.MaxUs) })
}

// writeServerCostRows are the servers' CPU and memory; a cluster's memory
// is per process, in its own table.
func writeServerCostRows(row func(string, func(*RunReport) string), cluster *ClusterReport) {
	row("server CPU (user+sys)", func(r *RunReport) string {
		if r.ServerCPUSeconds == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2f s", *r.ServerCPUSeconds)
	})
	row("reservations per server CPU-s", func(r *RunReport) string {
		if r.ReservationsPerCPUSecond == nil {
			return "n/a"
		}
		return grouped(int64(*r.ReservationsPerCPUSecond + 0.5))
	})
	row("server peak resident memory", func(r *RunReport) string {
		if cluster != nil && r == &cluster.RunReport {
			return "per process below"
		}
		if r.PeakRSSBytes == nil {
			return "n/a"
		}
		return mib(*r.PeakRSSBytes)
	})
	row("server CPU per reservation", func(r *RunReport) string {
		if r.ServerCPUSeconds == nil || r.Reservations == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f µs", *r.ServerCPUSeconds*1e6/float64(r.Reservations))
	})
}

func writeRestart(out io.Writer, r *RestartReport) {
	if r.Error != "" {
		fmt.Fprintf(out, "restart: FAILED: %s\n", r.Error)
		return
	}
	stop := "exit 0"
	if r.StopError != "" {
		stop = r.StopError
	}
	fmt.Fprintf(out, "restart: after kill -9 ready in %.2f s (%s resident); then stopped by SIGTERM in %.2f s (%s), restart ready in %.2f s (%s resident)\n",
		r.KillReadySeconds, mib(r.RSSAfterKillBytes), r.StopSeconds, stop, r.ReadySeconds, mib(r.RSSAfterRestartBytes))
}

// writeSamples prints the runs' sampled errors and invalid replies.
func writeSamples(out io.Writer, runs []*RunReport) {
	for _, run := range runs {
		for _, e := range run.ErrorSamples {
			fmt.Fprintf(out, "error (%s): %s\n", serverName(run), e)
		}
		for _, e := range run.InvalidSamples {
			fmt.Fprintf(out, "invalid reply (%s): %s\n", serverName(run), e)
		}
	}
}

// writeFlowGoals prints the ticketing goals as a table (the other benches
// use writeGoals).
func writeFlowGoals(out io.Writer, goals []Goal) {
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "goal\tthis run\ttarget\tmet\t")
	for _, g := range goals {
		val, met := "n/a", "n/a"
		if g.Value != nil {
			val = formatGoalValue(*g.Value, g.Unit)
		}
		if g.Met != nil {
			met = map[bool]string{true: "yes", false: "no"}[*g.Met]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.Name, val, g.Target, met, g.Note)
	}
	tw.Flush()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeSeats prints the double-booking check of one run, named when the
// table has more than one checked server.
func writeSeats(out io.Writer, s *RunReport, named bool) {
	prefix := ""
	if named {
		prefix = serverName(s) + ": "
	}
	fmt.Fprintf(out, "%sseats sold / offered: %s / %s\n", prefix, grouped(s.SeatsSold), grouped(s.SeatsOffered))
	if len(s.DoubleBookings) == 0 {
		fmt.Fprintf(out, "%sdouble booking: none\n", prefix)
		return
	}
	fmt.Fprintf(out, "%sDOUBLE BOOKING: %d seat(s) reserved more than once!\n", prefix, len(s.DoubleBookings))
	for i, d := range s.DoubleBookings {
		if i == 10 {
			fmt.Fprintf(out, "  … and %d more\n", len(s.DoubleBookings)-i)
			break
		}
		fmt.Fprintf(out, "  %s\n", d)
	}
}

// writeCluster prints the cluster's processes one by one and its CPU per
// reservation split into the nodes' and the broker's.
func writeCluster(out io.Writer, c *ClusterReport) {
	fmt.Fprintf(out, "\ncluster %q: %d nodes, broker %s, ready %.1f s after start (every partition owned)\n",
		c.Cluster, len(c.Nodes), c.Brokers, c.ReadySeconds)
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "  process\taddress\tpartitions\treservations sent\tCPU (user+sys)\tpeak resident memory\t")
	secs := func(v *float64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2f s", *v)
	}
	mem := func(v *int64) string {
		if v == nil {
			return "n/a"
		}
		return mib(*v)
	}
	for _, n := range c.Nodes {
		parts := make([]string, len(n.Owned))
		for i, p := range n.Owned {
			parts[i] = strconv.Itoa(p)
		}
		fmt.Fprintf(tw, "  node %s\t%s\t%s\t%s\t%s\t%s\t\n", n.ID, n.Addr, strings.Join(parts, ","), grouped(n.Reservations), secs(n.CPUSeconds), mem(n.PeakRSSBytes))
	}
	brokerCPU := secs(c.BrokerCPUSeconds)
	if c.BrokerCPUSeconds == nil {
		brokerCPU = "not measured"
	}
	pid := ""
	if c.BrokerPID > 0 {
		pid = fmt.Sprintf(" (pid %d)", c.BrokerPID)
	}
	fmt.Fprintf(tw, "  broker java%s\t%s\t\t\t%s\t%s\t\n", pid, c.Brokers, brokerCPU, mem(c.BrokerPeakRSSBytes))
	tw.Flush()
	us := func(v *float64) string {
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.1f µs", *v)
	}
	switch {
	case c.CPUPerReservationUs != nil:
		share := "n/a"
		if c.BrokerSharePercent != nil {
			share = fmt.Sprintf("%.0f %%", *c.BrokerSharePercent)
		}
		fmt.Fprintf(out, "CPU per reservation: %s (nodes %s + broker %s, the broker's share %s)",
			us(c.CPUPerReservationUs), us(c.NodesCPUPerReservationUs), us(c.BrokerCPUPerReservationUs), share)
	default:
		fmt.Fprintf(out, "CPU per reservation: nodes %s; %s", us(c.NodesCPUPerReservationUs), c.BrokerNote)
	}
	if c.EmbeddedPerReservationUs != nil {
		fmt.Fprintf(out, "; embedded %s", us(c.EmbeddedPerReservationUs))
		if c.MultipleOfEmbedded != nil {
			fmt.Fprintf(out, " (cluster %.2f×)", *c.MultipleOfEmbedded)
		}
	}
	fmt.Fprintln(out)
	if k := c.Counters; k != nil && k.Transactions > 0 && c.Reservations > 0 {
		fmt.Fprintf(out, "Kafka: %s transactions over the spike (%.1f of its reservations per transaction), %.1f engine batches each, %.2f ms from append to commit on average; forwarded to the owner: %s calls (%.0f %% of reservations), %s retries\n",
			grouped(int64(k.Transactions)), float64(c.Reservations)/k.Transactions, k.Appends/k.Transactions,
			1e3*k.ProduceSeconds/max(k.Appends, 1), grouped(int64(k.Forwarded)), 100*k.Forwarded/float64(c.Reservations), grouped(int64(k.ForwardRetries)))
	}
	if c.BrokerPeakRSSBytes != nil {
		fmt.Fprintln(out, "(the broker's peak resident memory is since it started: one broker serves every cluster of the invocation)")
	}
}

func serverName(r *RunReport) string { return serverLabel(r.Server) }

// serverLabel is what the tables call a server a report names "surge",
// "null" or by its --target URL.
func serverLabel(server string) string {
	switch server {
	case "surge":
		return "surge serve"
	case "null":
		return "do-nothing server"
	}
	return server
}

// writeGoals prints the goals of the commerce, jobs and sequencer benches
// under title: name, target, this run's value, whether it was met, note.
func writeGoals(out io.Writer, title string, goals []Goal) {
	fmt.Fprintf(out, "\n  %s\n", title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, g := range goals {
		v, met := "-", "n/a"
		if g.Value != nil {
			v = formatGoalValue(*g.Value, g.Unit)
		}
		if g.Met != nil {
			met = map[bool]string{true: "yes", false: "no"}[*g.Met]
		}
		line := fmt.Sprintf("  %s\t%s\t%s\t%s", g.Name, g.Target, v, met)
		if g.Note != "" {
			line += "\t(" + g.Note + ")"
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

func formatGoalValue(v float64, unit string) string {
	switch unit {
	case "%":
		return fmt.Sprintf("%.1f %%", v)
	case "×":
		return fmt.Sprintf("%.2f×", v)
	case "s":
		return fmt.Sprintf("%.2f s", v)
	case "ms":
		return fmt.Sprintf("%.2f ms", v)
	}
	return grouped(int64(v + 0.5))
}

// micros formats a latency in the unit that keeps it readable.
func micros(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.2f ms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.3f s", float64(us)/1e6)
}

// grouped writes n with thousands separators.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// mib renders a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func (r *RunReport) setPeakRSS(c *child, logf func(string, ...any)) {
	peak, _, err := c.memory()
	if err != nil {
		logf("warning: %s: peak resident memory not available: %v", c.name, err)
		return
	}
	r.PeakRSSBytes = &peak
}

// columns prints the tables that put runs side by side, a column each:
// a row is lead, its name, then sep and each run's cell, then tail.
type columns[T any] struct {
	w               io.Writer
	lead, sep, tail string
	runs            []T
}

func (c columns[T]) row(name string, cell func(T) string) {
	var b strings.Builder
	b.WriteString(c.lead + name)
	for _, r := range c.runs {
		b.WriteString(c.sep + cell(r))
	}
	b.WriteString(c.tail)
	fmt.Fprintln(c.w, b.String())
}

// latencyCell is "p50 / p95 / p99 / max", or "-" for no samples.
func latencyCell(x LatencyReport) string {
	if x.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s / %s", micros(x.P50Us), micros(x.P95Us), micros(x.P99Us), micros(x.MaxUs))
}
