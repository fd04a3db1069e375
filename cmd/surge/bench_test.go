package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.CommerceReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
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
