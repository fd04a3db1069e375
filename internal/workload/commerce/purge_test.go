package commerce

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// TestPurgeAfterRetention drives one confirmed and one cancelled saga
// through the harness with explicit times: each saga is readable until
// its retention has passed and gone after, its order and events stay,
// and replay and snapshot agree at every point.
func TestPurgeAfterRetention(t *testing.T) {
	h := setup(t, map[string]int64{"a": 5})
	const ret = 100 * ms
	ok := order("ok", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 999})
	ok.RetentionNs = ret
	h.Client(OrderKey("ok"), ok)
	for h.Deliver() {
	}
	endOK := h.Now
	h.Advance(40 * ms)
	cancel := order("cancel", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 999})
	cancel.RetentionNs = ret
	h.Client(OrderKey("cancel"), cancel)
	if res := h.Client(OrderKey("cancel"), &CancelOrder{OrderID: "cancel", Reason: "no", CancelledBy: "me"}); res.Outcome != OK {
		t.Fatalf("%+v", res)
	}
	endCancel := h.Now
	forever := order("forever", "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 999})
	h.Client(OrderKey("forever"), forever) // RetentionNs 0
	for h.Deliver() {
	}
	saga := func(id string) *Saga { return h.Machines[h.Part(OrderKey(id))].Query(&GetSaga{ID: id}).(*Saga) }
	if s := saga("ok"); s == nil || s.Status != SagaCompleted {
		t.Fatalf("ok: %+v", s)
	}
	if s := saga("cancel"); s == nil || s.Status != SagaCompensated {
		t.Fatalf("cancel: %+v", s)
	}

	h.Advance(endOK + ret - 1 - h.Now) // 1 ns before the first purge time
	if saga("ok") == nil {
		t.Fatal("purged 1 ns before its retention passed")
	}
	h.CheckReplay()
	h.Advance(1)
	if saga("ok") != nil {
		t.Fatal("not purged once its retention passed")
	}
	if saga("cancel") == nil {
		t.Fatal("the later saga went with the first")
	}
	if o := h.Machines[h.Part(OrderKey("ok"))].Query(&GetOrder{ID: "ok"}).(*Order); o == nil || o.Status != OrderConfirmed {
		t.Fatalf("the order must stay: %+v", o)
	}
	if evs := h.Machines[h.Part(OrderKey("ok"))].Query(&Events{Key: OrderKey("ok")}).([]Event); len(evs) == 0 {
		t.Fatal("the order's events must stay")
	}
	if p := h.payment("ok"); p == nil || p.Status != PaymentCaptured {
		t.Fatalf("the payment must stay: %+v", p)
	}
	h.CheckReplay()
	// The timer is re-armed for the next saga.
	h.Advance(endCancel + ret - h.Now)
	if saga("cancel") != nil {
		t.Fatal("the cancelled saga was not purged at its time")
	}
	if saga("forever") == nil {
		t.Fatal("a saga with retention 0 was purged")
	}
	// A cancelled, purged order still answers as before: cancel is a
	// no-op and confirm a conflict; its late messages change nothing.
	if res := h.Client(OrderKey("cancel"), &CancelOrder{OrderID: "cancel", Reason: "again", CancelledBy: "me"}); res.Outcome != Same {
		t.Fatalf("%+v", res)
	}
	if res := h.Client(OrderKey("ok"), &ConfirmOrder{OrderID: "ok"}); res.Outcome != Same {
		t.Fatalf("%+v", res)
	}
	if res := h.Client(OrderKey("ok"), &CreateOrder{OrderID: "ok", CustomerID: "c1", Items: ok.Items, DeadlineNs: DefaultDeadline}); res.Outcome != Conflict {
		t.Fatalf("re-creating a purged saga's order: %+v", res)
	}
	if h.TimersLeft() != 0 {
		t.Fatalf("%d timers left with nothing to purge", h.TimersLeft())
	}
	h.CheckReplay()
}

// TestPurgeClosedOrderMarker: a RefundForOrder for an order with no
// payment refuses payments for it until its retention has passed.
func TestPurgeClosedOrderMarker(t *testing.T) {
	h := newHarness(t, 1, 4)
	data, _ := (&RefundForOrder{OrderID: "x", Reason: "cancelled", RetentionNs: 50 * ms}).AppendBinary(nil)
	h.Apply(h.Part(PaymentKey("x")), engine.FromMessage, "", data)
	pay := &CreatePayment{OrderID: "x", CustomerID: "c", AmountCents: 100, Currency: "EUR", Method: "CREDIT_CARD"}
	h.Advance(50*ms - 1)
	if res := h.Client(PaymentKey("x"), pay); res.Outcome != Conflict {
		t.Fatalf("payment for a closed order before the purge: %+v", res)
	}
	h.Advance(1)
	h.CheckReplay()
	if res := h.Client(PaymentKey("x"), pay); res.Outcome != Created {
		t.Fatalf("payment after the marker's purge: %+v", res)
	}
}

// TestPurgeOnlyFromTimer: a client or a partition cannot purge.
func TestPurgeOnlyFromTimer(t *testing.T) {
	m := NewMachine()
	for _, k := range []engine.InputKind{engine.FromClient, engine.FromMessage} {
		fx := new(engine.Effects)
		m.Apply(&engine.Input{Kind: k, Cmd: &PurgeSagas{}}, fx)
		if res := fx.Replied().(*Result); res.Outcome != Invalid || !fx.IsUnchanged() {
			t.Fatalf("kind %v: %+v", k, res)
		}
	}
	fx := new(engine.Effects)
	m.Apply(&engine.Input{Kind: engine.FromClient, Cmd: &CreateOrder{OrderID: "o", CustomerID: "c", DeadlineNs: 1, RetentionNs: -1,
		Items: []LineItem{{ProductID: "a", Quantity: 1}}}}, fx)
	if res := fx.Replied().(*Result); res.Outcome != Invalid {
		t.Fatalf("negative retention: %+v", res)
	}
}

// TestPurgeBoundedPerFiring: more due entries than one firing may purge
// are purged over several firings, the timer re-armed at once.
func TestPurgeBoundedPerFiring(t *testing.T) {
	m := NewMachine()
	const n = maxPurgePerFiring + 10
	fx := new(engine.Effects)
	for i := range n {
		id := string(rune('a'+i%26)) + itoa(int64(i))
		m.sagas[id] = &Saga{ID: id, Status: SagaCompleted}
		m.retire(id, false, 0, 10, fx)
	}
	fx = new(engine.Effects)
	m.Apply(&engine.Input{Kind: engine.FromTimer, TimeNs: 20, Cmd: &PurgeSagas{}}, fx)
	if len(m.sagas) != 10 {
		t.Fatalf("%d sagas left after one firing, want 10", len(m.sagas))
	}
	var tm *engine.TimerOp
	for _, op := range fx.Timers() {
		if op.ID == purgeTimerID {
			tm = &op
		}
	}
	if tm == nil || tm.Cancel || tm.AtNs != 20 {
		t.Fatalf("timer %+v, want re-armed at once (20)", tm)
	}
	snap := m.AppendSnapshot(nil)
	r := NewMachine()
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	fx = new(engine.Effects)
	r.Apply(&engine.Input{Kind: engine.FromTimer, TimeNs: 20, Cmd: &PurgeSagas{}}, fx)
	if len(r.sagas) != 0 || len(fx.Timers()) != 0 {
		t.Fatalf("%d sagas, timers %v after the second firing", len(r.sagas), fx.Timers())
	}
}

// TestRestoreRefusesABadPurgeQueue: a snapshot whose queue names a saga
// that has not ended, or a marker that is not set, is refused.
func TestRestoreRefusesABadPurgeQueue(t *testing.T) {
	for _, bad := range []purgeEntry{{OrderID: "run", At: 5}, {OrderID: "gone", At: 5}, {OrderID: "run", At: 5, Marker: true}} {
		m := NewMachine()
		m.sagas["run"] = &Saga{ID: "run", Status: SagaInProgress}
		m.purgeQ.Push(bad)
		if err := NewMachine().Restore(m.AppendSnapshot(nil)); err == nil {
			t.Fatalf("restored a purge queue holding %+v", bad)
		}
	}
}
