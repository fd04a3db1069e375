package commerce

import (
	"fmt"
	"math"

	"github.com/surge-run/surge/internal/engine"
)

// Retention works as in the ticketing workload (docs/ARCHITECTURE.md,
// "Retention of terminal records"). The retention is carried in the
// logged CreateOrder (the API fills it in from --saga-retention), kept in
// the Saga and passed on in RefundForOrder, and the purge time is the
// logged time of the input that ended the saga plus it, never a setting
// of the process applying it: replay must purge exactly what the live
// run purged, even if the flag changed in between, and the engine's timer
// table, which replay rebuilds by re-running SetTimer, then gets the same
// deadlines.
//
// A timer per saga would cost more than the purge saves, so each
// partition keeps one FIFO of ended sagas and closed-order markers in the
// order they ended, and one engine timer (purgeTimerID) armed for the
// head's time. When it fires (a logged FromTimer input applying
// PurgeSagas), every due entry is purged, at most maxPurgePerFiring at a
// time so a partition never stalls long, and the timer is re-armed for
// the new head (at once if more are due). If the retention is lowered,
// entries made under the longer one hold back the ones queued behind
// them until they are due: an entry is purged at or after its time, never
// before. The FIFO is part of the snapshot, in queue order.
//
// Only the saga record and the marker go: the order, its payment and
// every event stay (users query them; TestBytesPerOrder measures them).
// A purged saga's late messages find no running saga and are ignored, as
// they were once it had ended; a direct payment for an order whose marker
// was purged is no longer refused.
const (
	// purgeTimerID cannot collide with a deadline timer ("saga/<id>").
	purgeTimerID      = "commerce/purge"
	maxPurgePerFiring = 4096
)

// retire queues the saga of orderID (marker: its closed-order marker)
// for purging after retention (0: kept for ever) and arms the purge
// timer if the queue was empty.
func (m *Machine) retire(orderID string, marker bool, now, retention int64, fx *engine.Effects) {
	if retention <= 0 {
		return
	}
	at := now + retention
	if at < now {
		at = math.MaxInt64
	}
	if m.purgeQ.Push(purgeEntry{OrderID: orderID, At: at, Marker: marker}) {
		m.armPurge(at, fx)
	}
}

func (m *Machine) armPurge(at int64, fx *engine.Effects) {
	// PurgeSagas has no fields, so it always encodes and the id is short:
	// SetTimer cannot refuse it.
	if err := fx.SetTimer(purgeTimerID, at, &PurgeSagas{}); err != nil {
		panic(err)
	}
}

// purge removes the due entries at the head of the queue, at most
// maxPurgePerFiring, and re-arms the timer for the next one.
func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := m.purgeQ.PopDue(now, maxPurgePerFiring, func(e purgeEntry) {
		if e.Marker {
			delete(m.closedOrders, e.OrderID)
		} else {
			delete(m.sagas, e.OrderID)
		}
	})
	if at, ok := m.purgeQ.Next(); ok {
		// Due already only if the limit stopped this firing: then at once.
		m.armPurge(max(at, now), fx)
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d", n)}
}
