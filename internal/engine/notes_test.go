package engine_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wal"
)

// TestNotesRouteToTheirWorkload: Options.Notes hands a note to the
// function of the workload that made it, and Notify still sees it; routes
// for a workload the engine does not run are refused at Open.
func TestNotesRouteToTheirWorkload(t *testing.T) {
	routed := make(chan string, 16)
	all := make(chan string, 16)
	e := openEngineWith(t, t.TempDir(), func(o *engine.Options) {
		o.Notes = map[uint8]func(int, any){7: func(part int, v any) { routed <- fmt.Sprintf("%d %v", part, v) }}
		o.Notify = func(part int, wl uint8, v any) { all <- fmt.Sprintf("%d/%d %v", part, wl, v) }
	})
	defer e.Close()
	p := e.PartitionOf("x")
	mustDo(t, e, p, &alarm{ID: "n", AtNs: time.Now().UnixNano()})
	for name, c := range map[string]struct {
		ch   chan string
		want string
	}{"Notes[7]": {routed, fmt.Sprintf("%d rang n", p)}, "Notify": {all, fmt.Sprintf("%d/7 rang n", p)}} {
		select {
		case got := <-c.ch:
			if got != c.want {
				t.Errorf("%s got %q, want %q", name, got, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s got no note within 10 s of the timer being due", name)
		}
	}

	dir := t.TempDir()
	sd, err := wal.OpenSnapshotDir(nil, filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	lg := openWAL(t, dir, 1)
	defer lg.Close()
	_, err = engine.Open(engine.Options{Partitions: 1, Log: lg, Snapshots: sd,
		Notes: map[uint8]func(int, any){8: func(int, any) {}}}, bank{})
	if err == nil || !strings.Contains(err.Error(), "workload 8") {
		t.Fatalf("Open with notes routed to a workload it does not run: %v", err)
	}
}
