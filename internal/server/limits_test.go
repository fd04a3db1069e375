package server

import (
	"context"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
)

// TestMemoryLimit: the flag's value is applied, 0 is the default, a
// negative value is no limit, and GOMEMLIMIT in the environment wins.
func TestMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	for _, c := range []struct {
		cfg  int64
		want int64
	}{{0, DefaultMemoryLimit}, {1 << 30, 1 << 30}, {-1, math.MaxInt64}} {
		if got := memoryLimit(Config{MemoryLimit: c.cfg}); got != c.want || debug.SetMemoryLimit(-1) != c.want {
			t.Fatalf("MemoryLimit %d: in force %d (runtime %d), want %d", c.cfg, got, debug.SetMemoryLimit(-1), c.want)
		}
	}
	// The runtime read GOMEMLIMIT when the process started; this stands
	// for that limit, which the flag must leave alone.
	debug.SetMemoryLimit(123 << 20)
	t.Setenv("GOMEMLIMIT", "123MiB")
	if got := memoryLimit(Config{MemoryLimit: 1 << 30}); got != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Fatalf("with GOMEMLIMIT set the limit became %d", debug.SetMemoryLimit(-1))
	}
}

// TestRunAppliesEventLimits: the limits in Config reach the API, and a
// negative one is refused at start with the flag's name.
func TestRunAppliesEventLimits(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	dir := t.TempDir()
	cfg := dataDirConfig(dir, 2, nil)
	cfg.Settings = module.Settings{"max-seats": -1}
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--max-seats") {
		t.Fatalf("negative --max-seats: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg = dataDirConfig(dir, 2, ready)
	cfg.Settings = module.Settings{"max-events": 1}
	go func() { errc <- Run(ctx, cfg) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not become ready")
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}()
	post := func(name string) (int, string) {
		resp, err := http.Post("http://"+addr+"/v1/event", "application/json",
			strings.NewReader(`{"eventName":"`+name+`","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":1}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := post("first"); st != 200 {
		t.Fatalf("first event: %d %s", st, body)
	}
	if st, body := post("second"); st != http.StatusConflict || !strings.Contains(body, "--max-events") {
		t.Fatalf("second event: %d %s", st, body)
	}
	if debug.SetMemoryLimit(-1) != DefaultMemoryLimit {
		t.Fatalf("memory limit in force %d, want the default", debug.SetMemoryLimit(-1))
	}
}
