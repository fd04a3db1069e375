package ticketing

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// areas is a ticketing workload whose machines already hold event "ev"
// with these areas (newTestMachine), for a Harness to make and rebuild.
type areas []AreaDef

func (a areas) ID() uint8                     { return WorkloadID }
func (a areas) Name() string                  { return "ticketing" }
func (a areas) NewMachine(int) engine.Machine { return newTestMachine(a...) }

// harness applies inputs the way the engine does (enginetest's Harness,
// one partition): it fires the purge timer the machine sets once the
// clock reaches it, and logs every input that changed something.
type harness struct {
	*enginetest.Harness[*Machine, *Result]
}

func newHarness(t *testing.T, a ...AreaDef) *harness {
	return &harness{enginetest.NewHarness[*Machine, *Result](t, areas(a), 1, 1)}
}

func (h *harness) m() *Machine { return h.Machines[0] }

// timer is when the purge timer fires (0: not armed).
func (h *harness) timer() int64 { return h.Timers[0][purgeTimerID].At }

// onFire has fn called with the time of each purge firing, after it
// applied.
func (h *harness) onFire(fn func(now int64)) {
	h.OnApply = func(_ int, cmd engine.Command, _ *Result, _ []any) {
		if _, ok := cmd.(*Purge); ok {
			fn(h.Now)
		}
	}
}
