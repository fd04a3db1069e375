package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Workloads `surge bench restart` can load the server with.
var RestartWorkloads = []string{"ticketing", "commerce", "jobs", "sequencer"}

// RestartOptions are the flags of `surge bench restart`.
type RestartOptions struct {
	Workloads    []string
	Load         time.Duration // load before the kill -9
	CommerceRate float64       // iterations/s of the commerce load
	ServeArgs    []string      // extra `surge serve` flags (the snapshot triggers under test)

	// Options: DataDir is the parent of the servers' data dirs and logs,
	// kept after the run; empty: a temp dir, removed after.
	Options
}

// RestartResult is one workload's load, kill -9 and restart.
type RestartResult struct {
	Workload    string  `json:"workload"`
	LoadSeconds float64 `json:"loadSeconds"`
	// At the kill: the log and snapshots on disk, and what the loaded
	// server had used.
	LogBytes       int64   `json:"logBytes"`
	Snapshots      int     `json:"snapshots"`
	SnapshotBytes  int64   `json:"snapshotBytes"`
	LoadCPUSeconds float64 `json:"loadCpuSeconds"`
	LoadPeakRSS    int64   `json:"loadPeakRssBytes"`
	// The snapshots the loaded server took, from its /metrics: how many,
	// the partitions' total and longest stall to capture them, and the
	// snapshot writer's encoding time.
	SnapshotsTaken float64 `json:"snapshotsTaken"`
	ForkSeconds    float64 `json:"snapshotForkSeconds"`
	ForkCount      float64 `json:"snapshotForks"`
	EncodeSeconds  float64 `json:"snapshotEncodeSeconds"`
	// The restart, timed from exec: /healthz answers 200, then the first
	// command (POST /api/customers) answers 201.
	ReadySeconds        float64 `json:"readySeconds"`
	FirstRequestSeconds float64 `json:"firstRequestSeconds"`
	ReplayedRecords     int64   `json:"replayedRecords"`
	RecoverySeconds     float64 `json:"recoverySeconds"` // the engine's own "took" for snapshot load + replay
	RestartCPUSeconds   float64 `json:"restartCpuSeconds"`
	RestartPeakRSS      int64   `json:"restartPeakRssBytes"`
	Error               string  `json:"error,omitempty"`
}

// RunRestart loads a fresh `surge serve` with each workload for o.Load,
// kills it with SIGKILL while the load runs, and times the restart on the
// same data dir.
func RunRestart(ctx context.Context, o RestartOptions) error {
	if o.Load <= 0 {
		return errors.New("--load must be positive")
	}
	for _, w := range o.Workloads {
		if !contains(RestartWorkloads, w) {
			return fmt.Errorf("--workloads: %q is not one of %s", w, strings.Join(RestartWorkloads, ","))
		}
	}
	rig := &Rig{o: o.Options, tmp: o.DataDir, keepTmp: true}
	if o.DataDir == "" {
		var err error
		if rig, err = newRig(o.Options, "surge-bench-restart-"); err != nil {
			return err
		}
	}
	defer rig.cleanup()
	var results []*RestartResult
	failed := false
	for _, w := range o.Workloads {
		r := restartOne(ctx, o, rig, w)
		if r.Error != "" {
			failed = true
		}
		results = append(results, r)
		printRestart(o.Stdout, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.JSONPath != "" {
		b, _ := json.MarshalIndent(struct {
			Benchmark string           `json:"benchmark"`
			ServeArgs []string         `json:"serveArgs"`
			Results   []*RestartResult `json:"results"`
		}{"restart", o.ServeArgs, results}, "", "  ")
		if err := os.WriteFile(o.JSONPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if failed {
		return ErrFailed
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// restartOne loads a server with wl in its own dir of the rig (data dir
// "data", both starts' output in "serve.log"), kills it and restarts it.
func restartOne(ctx context.Context, o RestartOptions, rig *Rig, wl string) *RestartResult {
	r := &RestartResult{Workload: wl, LoadSeconds: o.Load.Seconds()}
	fail := func(err error) *RestartResult {
		r.Error = err.Error()
		return r
	}
	dir := filepath.Join(rig.tmp, wl)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	addr, err := freeAddr()
	if err != nil {
		return fail(err)
	}
	args := append([]string{"serve", "--addr", addr, "--data-dir", filepath.Join(dir, "data")}, o.ServeArgs...)
	srv, _, err := rig.timedStart(ctx, wl+"/serve", args, addr)
	if err != nil {
		return fail(err)
	}
	defer srv.kill()
	fmt.Fprintf(o.Stderr, "%s: loading %s for %s\n", wl, srv.baseURL(), o.Load)
	loadErr := runLoad(ctx, o, wl, srv.baseURL(), filepath.Join(dir, "load.log"))
	if loadErr != nil {
		return fail(fmt.Errorf("load: %w (its output: %s)", loadErr, filepath.Join(dir, "load.log")))
	}
	if m, err := scrape(ctx, srv.baseURL()); err == nil {
		r.SnapshotsTaken, _ = m.value("surge_engine_snapshots_total")
		r.ForkSeconds, _ = m.value("surge_engine_snapshot_fork_seconds_sum")
		r.ForkCount, _ = m.value("surge_engine_snapshot_fork_seconds_count")
		r.EncodeSeconds, _ = m.value("surge_engine_snapshot_encode_seconds_sum")
	}
	r.LoadCPUSeconds, _ = srv.cpuSeconds()
	r.LoadPeakRSS, _, _ = srv.memory()
	srv.kill()
	r.LogBytes = dirBytes(filepath.Join(dir, "data", "wal"), "")
	r.SnapshotBytes = dirBytes(filepath.Join(dir, "data", "snapshots"), ".snap")
	r.Snapshots = dirFiles(filepath.Join(dir, "data", "snapshots"), ".snap")

	fmt.Fprintf(o.Stderr, "%s: killed with SIGKILL; restarting\n", wl)
	start := time.Now()
	again, secs, err := rig.timedStart(ctx, wl+"/serve", args, addr)
	if err != nil {
		return fail(err)
	}
	defer again.kill()
	r.ReadySeconds = secs
	if err := firstCommand(ctx, again.baseURL()); err != nil {
		return fail(err)
	}
	r.FirstRequestSeconds = time.Since(start).Seconds()
	r.RestartCPUSeconds, _ = again.cpuSeconds()
	r.RestartPeakRSS, _, _ = again.memory()
	r.ReplayedRecords, r.RecoverySeconds = recoveryLine(again.logPath)
	if err := again.stop(); err != nil {
		return fail(fmt.Errorf("stopping the restarted server: %w", err))
	}
	return r
}

// runLoad drives the server with one workload's generator until o.Load
// has passed; the server is killed right after, under load. Each
// generator is run again if it finishes early.
func runLoad(ctx context.Context, o RestartOptions, wl, target, logPath string) error {
	out, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer out.Close()
	lctx, cancel := context.WithTimeout(ctx, o.Load)
	defer cancel()
	for round := uint64(1); lctx.Err() == nil; round++ {
		if time.Until(deadlineOf(lctx)) < time.Second {
			<-lctx.Done() // too short for a generator's set-up
			break
		}
		err := loadRound(lctx, o, wl, target, round, out)
		if err != nil && lctx.Err() == nil && !errors.Is(err, ErrFailed) {
			return err
		}
	}
	return ctx.Err()
}

func loadRound(ctx context.Context, o RestartOptions, wl, target string, round uint64, out io.Writer) error {
	remaining := time.Until(deadlineOf(ctx))
	gen := Options{Target: target, Exe: o.Exe, Stdout: out, Stderr: out}
	switch wl {
	case "ticketing":
		// 100 areas of 400 seats take the 20,000 reservations of 1 to 4
		// seats nearly all: a refused one writes nothing to the log.
		return RunTicketing(ctx, TicketingOptions{Areas: 100, Reservations: 20000, Clients: 4, Groups: 1, Inflight: 256,
			HTTP2: true, Flow: FlowNative, Seed: round, Options: gen})
	case "commerce":
		return RunCommerce(ctx, CommerceOptions{Rate: o.CommerceRate, Duration: remaining, Clients: 4, MaxInflight: 10000,
			HTTP2: true, Seed: round, Options: gen})
	case "jobs":
		return RunJobs(ctx, JobsOptions{Phase: JobsPhaseSubmit, Duration: remaining, Concurrency: 200, Connections: 1,
			SubmitWork: true, Rate: 10000, Batch: 1, MaxInflight: 1000, Workers: 4, WorkerConc: 64, Options: gen})
	default:
		return RunSequencer(ctx, SequencerOptions{Scenarios: SeqScenarioPeer, Messages: 1_000_000, Groups: 1,
			Poll: 50 * time.Millisecond, Timeout: remaining, Options: gen})
	}
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// firstCommand retries a customer creation, a logged command, until it
// answers 201: the first request a client would see succeed.
func firstCommand(ctx context.Context, base string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	body := fmt.Sprintf(`{"email":"restart-%d@example.com","name":"Restart probe","address":"1 Probe Street","phone":"+1-555-0100"}`, time.Now().UnixNano())
	deadline := time.Now().Add(readyTimeout)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/customers", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no 201 from POST /api/customers within %s of the health check", readyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

var (
	recoveredRE = regexp.MustCompile(`msg=recovered .*replayed_records=(\d+)`)
	tookRE      = regexp.MustCompile(` took=([0-9.]+(?:ms|s|µs))`) // older builds do not log it
)

// recoveryLine reads the last start's "recovered" line from the server's
// log: the records it replayed and how long the engine's recovery took.
func recoveryLine(path string) (records int64, seconds float64) {
	f, err := os.Open(path)
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	records, seconds = -1, -1
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := recoveredRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		records, _ = strconv.ParseInt(m[1], 10, 64)
		seconds = -1
		if t := tookRE.FindStringSubmatch(sc.Text()); t != nil {
			if d, err := time.ParseDuration(t[1]); err == nil {
				seconds = d.Seconds()
			}
		}
	}
	return records, seconds
}

func dirBytes(dir, ext string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ext) {
			n += info.Size()
		}
	}
	return n
}

func dirFiles(dir, ext string) int {
	n := 0
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ext) {
			n++
		}
	}
	return n
}

func printRestart(w io.Writer, r *RestartResult) {
	if r.Error != "" {
		fmt.Fprintf(w, "%-10s FAILED: %s\n", r.Workload, r.Error)
		return
	}
	fork := 0.0
	if r.ForkCount > 0 {
		fork = r.ForkSeconds / r.ForkCount * 1000
	}
	fmt.Fprintf(w, "%-10s load %.0f s (CPU %.1f s, peak RSS %s; %.0f snapshots taken, capture %.1f ms each on average, encoding %.2f s in all): at the kill log %s, %d snapshot files %s\n",
		r.Workload, r.LoadSeconds, r.LoadCPUSeconds, mib(r.LoadPeakRSS), r.SnapshotsTaken, fork, r.EncodeSeconds, mib(r.LogBytes), r.Snapshots, mib(r.SnapshotBytes))
	fmt.Fprintf(w, "%-10s after kill -9: replayed %d records (recovery %.2f s), /healthz 200 at %.2f s, first command at %.2f s, CPU %.2f s, peak RSS %s\n",
		"", r.ReplayedRecords, r.RecoverySeconds, r.ReadySeconds, r.FirstRequestSeconds, r.RestartCPUSeconds, mib(r.RestartPeakRSS))
}
