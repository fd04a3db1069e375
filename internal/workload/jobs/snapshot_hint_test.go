package jobs

import (
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// The size a fork estimates (SnapshotSizeHint, which the engine sizes the
// encoding buffer with) holds the whole snapshot, so encoding a state
// that grew since its last snapshot does not grow the buffer by copies,
// and it is not far above it: pending jobs with payloads of several
// sizes, leased ones, finished ones with results and errors.
func TestSnapshotSizeHintHoldsTheSnapshot(t *testing.T) {
	m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: 1 << 20}})
	hinter, ok := any(m).(engine.SnapshotSizeHinter)
	if !ok {
		t.Fatal("the jobs machine gives the engine no snapshot size hint")
	}
	fx := new(engine.Effects)
	apply := func(cmd engine.Command) *Result {
		fx.Reset()
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1e18, Cmd: cmd}, fx)
		return fx.Replied().(*Result)
	}
	for i := range 20_000 {
		payload := make([]byte, 10+i%300)
		if r := apply(&Submit{JobID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), Queue: DefaultQueue, Payload: payload}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	leased := apply(&Lease{Queue: DefaultQueue, Worker: "worker-1", Max: MaxLeaseBatch, LeaseNs: 60e9, Session: "s"}).Jobs
	for i, j := range leased[:len(leased)/2] {
		apply(&Report{JobID: j.ID, Worker: "worker-1", Success: i%2 == 0, Result: []byte("done"), Error: "it failed"})
	}
	for _, name := range []string{"grown from empty", "again"} {
		encode := m.ForkSnapshot()
		hint := hinter.SnapshotSizeHint()
		buf := make([]byte, 0, hint)
		data := encode(buf)
		t.Logf("%s: hint %d bytes, snapshot %d", name, hint, len(data))
		if len(data) > hint {
			t.Errorf("%s: the snapshot is %d bytes, over the hint of %d: its buffer grew by copies", name, len(data), hint)
		}
		if hint > len(data)*3/2 {
			t.Errorf("%s: the hint of %d bytes is over 1.5 times the snapshot's %d", name, hint, len(data))
		}
	}
}
