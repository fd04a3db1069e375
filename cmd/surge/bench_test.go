package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/bench"
)

// TestBenchCommerceFlags: the subcommand's flags reach the bench; two
// short levels against an in-process do-nothing server, no baseline.
func TestBenchCommerceFlags(t *testing.T) {
	srv := httptest.NewServer(bench.NullHandler())
	defer srv.Close()
	jsonPath := filepath.Join(t.TempDir(), "c.json")
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"commerce", "--target", srv.URL, "--baseline=false", "--levels", "100,200",
		"--duration", "500ms", "--clients", "2", "--http2=false", "--seed", "9", "--json", jsonPath})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rep, b := readReport[bench.CommerceReport](t, jsonPath)
	c := rep.Config
	if !rep.OK || len(rep.Levels) != 2 || c.Seed != 9 || c.HTTP2 || c.Clients != 2 || c.DurationSeconds != 0.5 || c.Baseline {
		t.Fatalf("report %s", b)
	}
	for i, want := range []float64{100, 200} {
		l := rep.Levels[i]
		if l.Rate != want || l.Server == nil || l.Baseline != nil || l.Server.Iterations < int64(want/2)-3 || l.Server.Errors != 0 {
			t.Fatalf("level %d: %+v", i, l.Server)
		}
	}
	if !strings.Contains(out.String(), "open loop at 200 iterations/s") {
		t.Fatalf("no readable report:\n%s", out.String())
	}
}

// TestBenchSequencerFlags: the subcommand's flags reach the bench, against
// an in-process stand-in for the peer's routes that sequences a group as
// soon as it is created.
func TestBenchSequencerFlags(t *testing.T) {
	var mu sync.Mutex
	posted := map[string]map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /messages", func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		posted[b["name"].(string)] = map[string]int{"n": int(b["numberOfMessages"].(float64)),
			"delay": int(b["creationDelay"].(float64)), "proc": int(b["processingTime"].(float64))}
		mu.Unlock()
	})
	mux.HandleFunc("DELETE /messages", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /list/sequenced/count", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprint(w, posted[r.URL.Query().Get("name")]["n"])
	})
	mux.HandleFunc("GET /list/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"isOrdered":true,"createdToSequenced":{"p50":1,"p99":2}}`)
	})
	mux.HandleFunc("GET /list/perfs", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{}`) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "process_cpu_seconds_total 1\n") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	jsonPath := filepath.Join(t.TempDir(), "s.json")
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"sequencer", "--target", srv.URL, "--scenario", "delays,groups", "--messages", "500", "--groups", "3",
		"--processing-time", "2", "--creation-delay", "1", "--groups-creation-delay", "3", "--poll", "20ms", "--timeout", "5s", "--json", jsonPath})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rep, b := readReport[bench.SequencerReport](t, jsonPath)
	c := rep.Config
	if !rep.OK || len(rep.Scenarios) != 2 || c.Messages != 500 || c.Groups != 3 || c.PollMs != 20 || c.TimeoutSeconds != 5 {
		t.Fatalf("report %s", b)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]map[string]int{"bench-delays": {"n": 500, "delay": 1, "proc": 2}, "bench-groups-000": {"n": 500, "delay": 3, "proc": 0},
		"bench-groups-001": {"n": 500, "delay": 3, "proc": 0}, "bench-groups-002": {"n": 500, "delay": 3, "proc": 0}}
	if !reflect.DeepEqual(posted, want) {
		t.Fatalf("POSTed %v, want %v", posted, want)
	}
	if !strings.Contains(out.String(), "3 groups at once") {
		t.Fatalf("no readable report:\n%s", out.String())
	}
}

// TestBenchRestart runs `surge bench restart` on the real server for a
// few seconds of ticketing load with a small --snapshot-bytes, which also
// checks that the flag reaches the engine: the loaded server took
// snapshots by bytes (the command count is out of reach), they were on
// disk at the kill -9, and the restart answered after replaying the tail.
// No timing is asserted.
func TestBenchRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildSurge(t)
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	// 32 KiB of log is a few hundred reservations: a busy machine logs
	// that much in 3 s (at 256 KiB one once did not, and took no snapshot).
	cmd.SetArgs([]string{"restart", "--workloads", "ticketing", "--load", "3s", "--serve-exe", bin, "--json", jsonPath,
		"--serve-flag=--snapshot-every=100000000", "--serve-flag=--snapshot-bytes=32KiB", "--serve-flag=--snapshot-interval=0"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Results []bench.RestartResult `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("report %s", b)
	}
	r := rep.Results[0]
	if r.Error != "" || r.SnapshotsTaken < 1 || r.Snapshots < 1 || r.ReplayedRecords < 0 || r.ReadySeconds <= 0 || r.FirstRequestSeconds < r.ReadySeconds {
		t.Fatalf("result %+v\n%s", r, out.String())
	}
	t.Logf("%d snapshots taken, replayed %d records", int(r.SnapshotsTaken), r.ReplayedRecords)
}

// TestBenchTicketingCrowdFlags: --crowd takes the peer's 5 groups and its
// seat ratio unless told otherwise, and refuses flags that do not apply.
// The do-nothing server answers every GET with the same two seats, so the
// run must fail with double bookings.
func TestBenchTicketingCrowdFlags(t *testing.T) {
	srv := httptest.NewUnstartedServer(bench.NullHandler())
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	defer srv.Close()
	jsonPath := filepath.Join(t.TempDir(), "crowd.json")
	run := func(args ...string) (string, error) {
		cmd := newBenchCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"ticketing"}, args...))
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	out, err := run("--crowd", "--target", srv.URL, "--baseline=false", "-n", "40", "--json", jsonPath)
	if err != bench.ErrFailed {
		t.Fatalf("err %v, want the run to fail on double booking\n%s", err, out)
	}
	rep, b := readReport[bench.CrowdReport](t, jsonPath)
	if c := rep.Config; c.Groups != bench.CrowdGroups || c.Areas != bench.CrowdAreas(40) || c.ClientsPerGroup != 4 || c.Transport != bench.CrowdTransportXNet {
		t.Fatalf("config %+v: want the peer's 5 groups, its seat ratio, 4 x/net clients", c)
	}
	if s := rep.Server; s == nil || s.Reservations != 200 || len(s.DoubleBookings) == 0 || rep.OK {
		t.Fatalf("report %s", b)
	}
	for _, bad := range [][]string{
		{"--crowd", "--flow", "native"},
		{"--crowd", "--cluster", "3"},
		{"--serve-flag=--pprof"},
		{"--crowd-transport", "net/http"},
		{"--crowd", "--http2=false", "--crowd-transport", "net/http"}, // an HTTP/2 transport for an HTTP/1.1 crowd
		{"--kill-after", "1s"},
		{"--kill-after-decisions", "10"},
		{"--crowd", "--kill-after", "1s"}, // the bench must own the server it kills
	} {
		if _, err := run(append(bad, "--target", srv.URL)...); err == nil || err == bench.ErrFailed {
			t.Errorf("%v: err %v, want the flags refused", bad, err)
		}
	}
}

// runTicketingBench runs `surge bench ticketing` with args and --json,
// fails the test if it fails, and returns the JSON report, its bytes and
// what the command printed.
func runTicketingBench(t *testing.T, ctx context.Context, args ...string) (*bench.Report, []byte, string) {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "report.json")
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"ticketing", "--json", jsonPath}, args...))
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	rep, b := readTicketingReport(t, jsonPath)
	return rep, b, out.String()
}

// readReport reads the JSON report a bench wrote with --json.
func readReport[T any](t *testing.T, path string) (*T, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep T
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep, b
}

// readTicketingReport reads the JSON report `surge bench ticketing
// --json` wrote.
func readTicketingReport(t *testing.T, path string) (*bench.Report, []byte) {
	t.Helper()
	return readReport[bench.Report](t, path)
}
