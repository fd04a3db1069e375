package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/surge-run/surge/internal/clientconn"
)

// Options are the flags and outputs every `surge bench` command shares;
// each command's options embed them.
type Options struct {
	Target     string // a running server's base URL; empty to start one
	Partitions int    // --partitions for a started server (0: its default)
	DataDir    string // parent of the started servers' data dirs; empty for a temp dir
	JSONPath   string
	// ChartsDir and HTMLPath are --charts (SVGs and a Markdown report in
	// a dir) and --html (one self-contained page); chartreport.go.
	ChartsDir string
	HTMLPath  string
	// SampleInterval is --sample-interval, a timeline point's length
	// (0: timelineInterval).
	SampleInterval time.Duration

	Exe string // the surge binary, to start `serve` and `bench nullserver`
	// ServeExe, if set, is the binary started for `serve` instead of Exe:
	// two builds of the server measured by one generator.
	ServeExe    string
	Stdout      io.Writer
	Stderr      io.Writer
	ProgressTTY bool
	// Conn is --ca-file and --token (conn.go).
	Conn clientconn.Options
}

// Rig owns the processes a bench starts (servers, do-nothing servers) and
// the temp dir that holds their logs and data: every exit path, ctrl-C
// included, ends in cleanup, so no server outlives the bench.
type Rig struct {
	o        Options
	tmp      string
	keepTmp  bool
	children []*child
	// atExit runs in cleanup after the children are killed (a broker).
	atExit []func()
}

func newRig(o Options, prefix string) (*Rig, error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	return &Rig{o: o, tmp: tmp}, nil
}

func (r *Rig) cleanup() {
	for _, c := range r.children {
		c.kill()
	}
	for _, f := range r.atExit {
		f()
	}
	if !r.keepTmp {
		_ = os.RemoveAll(r.tmp)
	}
}

func (r *Rig) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Stderr, format+"\n", args...)
}

func (r *Rig) spawn(name string, args []string, addr string) (*child, error) {
	return r.spawnEnv(name, args, addr, nil)
}

// spawnEnv is spawn in env (nil: childEnv()).
func (r *Rig) spawnEnv(name string, args []string, addr string, env []string) (*child, error) {
	return r.spawnOn(name, args, addr, env, nil)
}

// spawnOn is spawnEnv on cpus (nil: wherever the bench may run).
func (r *Rig) spawnOn(name string, args []string, addr string, env []string, cpus []int) (*child, error) {
	exe := r.o.Exe
	if r.o.ServeExe != "" && len(args) > 0 && args[0] == "serve" {
		exe = r.o.ServeExe
	}
	c, err := startChild(name, exe, args, addr, filepath.Join(r.tmp, name+".log"), env, cpus)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.https = servesTLS(args)
	r.children = append(r.children, c)
	return c, nil
}

// timedStart starts a server and returns it with the seconds from process
// start to its first healthy answer. On error the child is already killed.
func (r *Rig) timedStart(ctx context.Context, name string, args []string, addr string) (*child, float64, error) {
	t0 := time.Now()
	c, err := r.spawn(name, args, addr)
	if err != nil {
		return nil, 0, err
	}
	if _, err := c.waitReady(ctx); err != nil {
		c.kill()
		return nil, 0, err
	}
	return c, time.Since(t0).Seconds(), nil
}

// prefixed is "label: " + s, or s alone for an empty label.
func prefixed(label, s string) string {
	if label == "" {
		return s
	}
	return label + ": " + s
}

// startNull starts the do-nothing server (`surge bench nullserver`), the
// baseline that shows the machine's ceiling; label prefixes its log line.
func (r *Rig) startNull(ctx context.Context, label, name string, extra ...string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r.logf("%s", prefixed(label, "starting the do-nothing server on "+addr))
	c, err := r.spawn(name, append([]string{"bench", "nullserver", "--addr", addr}, extra...), addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// serveDir is a started server's data dir: tmpName in the rig's temp dir,
// or userName under --data-dir.
func (r *Rig) serveDir(tmpName, userName string) (string, error) {
	dir := filepath.Join(r.tmp, tmpName)
	if r.o.DataDir != "" {
		dir = filepath.Join(r.o.DataDir, userName)
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// startServe starts `surge serve` on a free port and a fresh data dir
// (see serveDir), with --partitions and extra flags, and waits until it is
// ready. It returns the args, to start it again on the same dir.
func (r *Rig) startServe(ctx context.Context, label, name, tmpName, userName string, extra ...string) (*child, []string, error) {
	return r.startServeEnv(ctx, label, name, tmpName, userName, nil, extra...)
}

// startServeEnv is startServe in env (nil: childEnv()).
func (r *Rig) startServeEnv(ctx context.Context, label, name, tmpName, userName string, env []string, extra ...string) (*child, []string, error) {
	return r.startServeOn(ctx, label, name, tmpName, userName, env, nil, extra...)
}

// startServeOn is startServeEnv on cpus (nil: wherever the bench may run).
func (r *Rig) startServeOn(ctx context.Context, label, name, tmpName, userName string, env []string, cpus []int, extra ...string) (*child, []string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	dataDir, err := r.serveDir(tmpName, userName)
	if err != nil {
		return nil, nil, err
	}
	args := []string{"serve", "--addr", addr, "--data-dir", dataDir}
	if r.o.Partitions > 0 {
		args = append(args, "--partitions", strconv.Itoa(r.o.Partitions))
	}
	args = append(args, extra...)
	line := fmt.Sprintf("starting surge serve on %s (data dir %s)", addr, dataDir)
	if len(extra) > 0 {
		line = fmt.Sprintf("starting surge serve on %s (data dir %s; %s)", addr, dataDir, strings.Join(extra, " "))
	}
	r.logf("%s", prefixed(label, line))
	c, err := r.spawnOn(name, args, addr, env, cpus)
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.waitReady(ctx); err != nil {
		return nil, nil, fmt.Errorf("surge serve failed to start: %w", err)
	}
	return c, args, nil
}

// target is the server under test: `surge serve` the rig started, or the
// running server --target names.
type target struct {
	base string
	proc *child // nil for --target
	args []string
}

// target starts `surge serve` (see startServe) unless --target is given.
func (r *Rig) target(ctx context.Context, label, name, tmpName, userName string, extra ...string) (*target, error) {
	if r.o.Target != "" {
		return &target{base: strings.TrimRight(r.o.Target, "/")}, nil
	}
	c, args, err := r.startServe(ctx, label, name, tmpName, userName, extra...)
	if err != nil {
		return nil, err
	}
	return &target{base: c.baseURL(), proc: c, args: args}, nil
}

// name is what reports call the server: "surge", or the --target URL.
func (t *target) name(o Options) string {
	if o.Target != "" {
		return o.Target
	}
	return "surge"
}

// cpu reads the server's CPU seconds: from /proc for a server the rig
// started, from its /metrics otherwise.
func (t *target) cpu(ctx context.Context) func() (float64, error) {
	return func() (float64, error) {
		if t.proc != nil {
			return t.proc.cpuSeconds()
		}
		return metricsCPUSeconds(ctx, t.base)
	}
}

// peakRSS is the started server's peak resident memory; nil for --target
// or when /proc could not be read.
func (t *target) peakRSS() *int64 { return peakOf(t.proc) }

func peakOf(c *child) *int64 {
	if c == nil {
		return nil
	}
	peak, _, err := c.memory()
	if err != nil {
		return nil
	}
	return &peak
}

// stop ends a started server with SIGTERM; it must exit 0.
func (t *target) stop() error {
	if t.proc == nil {
		return nil
	}
	if err := t.proc.stop(); err != nil {
		return fmt.Errorf("server did not exit 0 on SIGTERM: %w", err)
	}
	return nil
}

// stopNull stops a do-nothing server; its exit is only worth a warning.
func (r *Rig) stopNull(c *child) {
	if err := c.stop(); err != nil {
		r.logf("warning: do-nothing server: %v", err)
	}
}

// Verdict ends every report: whether the run passed, and why not.
type Verdict struct {
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

func (v *Verdict) add(problems ...string) { v.Problems = append(v.Problems, problems...) }

// scenario is one `surge bench` command on the rig: set up, load, judge.
// runScenario runs them in that order and writes the verdict.
type scenario interface {
	// setup prepares what every step needs (a broker) and prints the
	// report's header, if any.
	setup(ctx context.Context, rig *Rig) error
	// load runs each step against its servers, printing each as it ends
	// and adding what fails it to the verdict; an error ends the run.
	load(ctx context.Context, rig *Rig) error
	// judge adds the problems only the finished run shows, and prints
	// what summarises the run.
	judge(out io.Writer)
	// report is what --json writes; verdict its part runScenario sets.
	report() any
	verdict() *Verdict
	// passed is the last line of a run without problems; failed the
	// error of one with.
	passed() string
	failed() error
}

// runScenario runs s on a fresh rig and ends like every bench: the JSON,
// then FAILED with the problems (the logs kept) or the OK line.
func runScenario(ctx context.Context, o Options, tmpPrefix string, s scenario) error {
	if err := checkConn(o.Conn); err != nil {
		return err
	}
	if err := checkCharted(o, s); err != nil {
		return err
	}
	if err := checkSampleInterval(o.SampleInterval); err != nil {
		return err
	}
	ctx = withConn(ctx, o.Conn)
	rig, err := newRig(o, tmpPrefix)
	if err != nil {
		return err
	}
	defer rig.cleanup()
	v := s.verdict()
	if v.Problems == nil {
		v.Problems = []string{}
	}
	if err := s.setup(ctx, rig); err != nil {
		return err
	}
	if err := s.load(ctx, rig); err != nil {
		v.add(err.Error())
	}
	s.judge(o.Stdout)
	v.OK = len(v.Problems) == 0
	if o.JSONPath != "" {
		if err := writeAnyJSON(o.JSONPath, s.report()); err != nil {
			v.OK = false
			v.add("write JSON: " + err.Error())
		}
	}
	if c, ok := s.(charted); ok && o.chartsRequested() {
		if err := writeChartOutputs(o, c); err != nil {
			v.OK = false
			v.add(err.Error())
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; servers stopped")
	}
	if !v.OK {
		fmt.Fprintf(o.Stdout, "\nFAILED:\n  %s\n", strings.Join(v.Problems, "\n  "))
		// Only servers the bench started leave logs worth keeping; against
		// --target the dir is empty.
		if rig.keepTmp = len(rig.children) > 0; rig.keepTmp {
			fmt.Fprintf(o.Stdout, "logs kept in %s\n", rig.tmp)
		}
		return s.failed()
	}
	fmt.Fprintln(o.Stdout, "\n"+s.passed())
	return nil
}

// progress prints line() on w every period until stopped: redrawn in
// place on a terminal (tty), a line at a time otherwise.
func progress(w io.Writer, tty bool, every time.Duration, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				if tty {
					fmt.Fprint(w, "\r\033[K")
				}
				return
			case <-t.C:
			}
			if tty {
				fmt.Fprintf(w, "\r\033[K%s", line())
			} else {
				fmt.Fprintln(w, line())
			}
		}
	}()
	return func() { close(quit); <-finished }
}

// cpuMeter measures one window's CPU: the server's, read by a function
// (it has several sources: /proc, /metrics, a restarted process), and
// the bench's own, which shares the machine with the server.
type cpuMeter struct {
	read         func() (float64, error)
	server, self float64
	err          error
}

func meterCPU(read func() (float64, error)) *cpuMeter {
	m := &cpuMeter{read: read}
	m.server, m.err = read()
	m.self = selfCPUSeconds()
	return m
}

// generator is the bench's CPU seconds since meterCPU.
func (m *cpuMeter) generator() float64 { return selfCPUSeconds() - m.self }

// used is the server's CPU seconds since meterCPU, or why it is unknown.
func (m *cpuMeter) used() (float64, error) {
	if m.err != nil {
		return 0, m.err
	}
	now, err := m.read()
	return now - m.server, err
}

// usedOrWarn is used, with a warning on w when it is unknown.
func (m *cpuMeter) usedOrWarn(w io.Writer, label string) (float64, bool) {
	v, err := m.used()
	if err != nil {
		fmt.Fprintf(w, "warning: %s: server CPU not available: %v\n", label, err)
		return 0, false
	}
	return v, true
}

// The open loop's pacing: between due iterations it sleeps until the next
// is due, at least scheduleMinSleep (a shorter sleep costs more than it
// gains) and at most scheduleMaxSleep (to see ctx end soon).
const (
	scheduleMinSleep = 200 * time.Microsecond
	scheduleMaxSleep = 10 * time.Millisecond
)

// schedule is an open loop: it calls due(i, at) for iteration i, due at
// at, rate times a second for d on a fixed clock, in order, whether or not
// earlier iterations were answered (a crowd does not wait for each
// other). due must not block. It returns how long the schedule ran.
func schedule(ctx context.Context, rate float64, d time.Duration, due func(i int64, at time.Time)) time.Duration {
	start := time.Now()
	at := func(i int64) time.Time { return start.Add(time.Duration(float64(i) / rate * float64(time.Second))) }
	var i int64
	for ctx.Err() == nil {
		el := time.Since(start)
		if el >= d {
			// A sleep that overran the end (a busy machine) still owes
			// the iterations due before it: the count offered is the
			// schedule's, not the scheduler's luck.
			for n := int64(math.Ceil(d.Seconds() * rate)); i < n; i++ {
				due(i, at(i))
			}
			break
		}
		for n := int64(el.Seconds()*rate) + 1; i < n; i++ {
			due(i, at(i))
		}
		time.Sleep(min(max(time.Until(at(i)), scheduleMinSleep), scheduleMaxSleep))
	}
	return time.Since(start)
}
