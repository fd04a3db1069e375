package jobs

import (
	"fmt"
	"math"

	"github.com/surge-run/surge/internal/engine"
)

// Finished jobs are purged once the retention logged in their Submit has
// passed (never a setting of the process applying it, so replay purges
// the same jobs). As in commerce, one timer per partition serves a FIFO
// of finished jobs in the order they finished, instead of a timer per
// job. A manually retried job leaves a stale entry; purge skips entries
// whose job no longer ends at that time.
const (
	purgeTimerID      = "jobs/purge"
	maxPurgePerFiring = 4096
)

func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := m.purgeQ.PopDue(now, maxPurgePerFiring, func(e purgeEntry) {
		m.purgeIfDue(e, fx)
	})
	if at, ok := m.purgeQ.Next(); ok {
		m.setTimer(fx, purgeTimerID, max(at, now), &PurgeJobs{})
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d", n)}
}

// setTimer arms a timer whose command is this package's own and whose id
// is short (job ids are at most MaxIDLen), so SetTimer cannot refuse it.
func (m *Machine) setTimer(fx *engine.Effects, id string, at int64, cmd engine.Command) {
	if err := fx.SetTimer(id, at, cmd); err != nil {
		panic(err)
	}
}

func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
