package commerce

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire"
)

// The dead-letter queue: a saga message that a partition cannot process
// is parked here, in the partition that received it, with its cause,
// instead of being applied. An operator lists it, replays it (it is then
// applied as if it had just arrived) or discards it. The only cause today
// is the injected fault (SetFault), which makes every forward saga step
// fail: ReserveForOrder at a product, ProcessPaymentForOrder at a payment,
// and the answers StockReserved, StockFailed, PaymentProcessed and
// PaymentFailed at an order.
//
// Compensation is never parked (ReleaseForOrder, RefundForOrder, the
// deadline and purge timers, CommitForOrder of a confirmed order): a fault
// may hold a saga back, but never past its deadline, and never leaves
// stock reserved or a payment captured for an order that has ended.
//
// A parked step's saga is still bounded by its deadline. When the saga
// ends (deadline or cancel), its parked entries are moot: replaying a
// parked ReserveForOrder would reserve stock for a cancelled order. So
// every entry of the order is dropped (counted in Dropped) wherever the
// end of the saga reaches: at the order's partition when it compensates,
// and at each product and payment partition when its ReleaseForOrder or
// RefundForOrder arrives, which the engine delivers after the parked
// message (FIFO per partition pair).
//
// Everything here is state of the machine: the fault switch is a logged
// command, each entry and the counters are in the snapshot, and a replay
// or discard is a logged command that removes the entry in the same Apply
// that processes it, so a replayed entry is processed exactly once, also
// across a crash and the replay of the log.

// MaxDLQPerPartition bounds the entries parked in one partition. Past
// it the oldest entry is discarded (counted in Evicted): its saga is
// compensated by its deadline like any other saga whose step is parked.
const MaxDLQPerPartition = 10_000

// DefaultFaultMessage is the cause of entries parked while the fault is
// on and POST /api/admin/fault named no failureMessage.
const DefaultFaultMessage = "Injected fault"

// Client commands of the dead-letter queue.
type (
	// SetFault switches fault injection in one partition (the API sends
	// it to every partition).
	SetFault struct {
		Enabled bool
		Message string
	}
	// ReplayDLQ applies the parked entry ID and removes it.
	ReplayDLQ struct{ ID string }
	// DiscardDLQ removes the parked entry ID without applying it.
	DiscardDLQ struct{ ID string }
)

func (x *SetFault) code(c *wire.Coder)   { c.Bool(&x.Enabled); c.Str(&x.Message) }
func (x *ReplayDLQ) code(c *wire.Coder)  { c.Str(&x.ID) }
func (x *DiscardDLQ) code(c *wire.Coder) { c.Str(&x.ID) }

func (x *SetFault) AppendBinary(b []byte) ([]byte, error)   { return encode(b, tagSetFault, x) }
func (x *ReplayDLQ) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagReplayDLQ, x) }
func (x *DiscardDLQ) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagDiscardDLQ, x) }

// DLQEntry is one parked message.
type DLQEntry struct {
	ID       string // DLQID(partition, Seq)
	Seq      uint64
	OrderID  string // the saga the message belongs to
	Cause    string
	FailedAt int64
	// Data is the message as it was logged (tag, then fields); Decode
	// turns it back into the command.
	Data []byte
}

// DLQStats are a partition's dead-letter counters; they only grow,
// except Count and Fault.
type DLQStats struct {
	Count                                         int
	Fault                                         bool
	FaultMessage                                  string
	Parked, Replayed, Discarded, Evicted, Dropped uint64
}

// dlq is the dead-letter state of one partition.
type dlq struct {
	part    int // for ids; not state (the engine gives it)
	fault   bool
	message string
	next    uint64     // Seq of the next entry
	entries []DLQEntry // by Seq
	stats   DLQStats   // counters only; Count and Fault are derived
	// perOrder counts the entries of each order, so the end of a saga
	// looks at the queue only if it holds something of that order.
	perOrder map[string]int
}

// DLQID names entry seq of partition part: the API finds the partition
// from the id alone.
func DLQID(part int, seq uint64) string { return fmt.Sprintf("dlq-%d-%d", part, seq) }

// ParseDLQID undoes DLQID.
func ParseDLQID(id string) (part int, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(id, "dlq-")
	p, s, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 {
		return 0, 0, false
	}
	pn, err1 := strconv.Atoi(p)
	sn, err2 := strconv.ParseUint(s, 10, 64)
	return pn, sn, err1 == nil && err2 == nil && pn >= 0 && strconv.Itoa(pn) == p && strconv.FormatUint(sn, 10) == s
}

// faultable reports whether cmd is a forward saga step, and its order.
func faultable(cmd engine.Command) (string, bool) {
	switch c := cmd.(type) {
	case *ReserveForOrder:
		return c.OrderID, true
	case *StockReserved:
		return c.OrderID, true
	case *StockFailed:
		return c.OrderID, true
	case *ProcessPaymentForOrder:
		return c.OrderID, true
	case *PaymentProcessed:
		return c.OrderID, true
	case *PaymentFailed:
		return c.OrderID, true
	case *CustomerVerified:
		// The answer, at the order's partition, where the saga's end
		// drops it. Not the question (VerifyCustomerForOrder): at the
		// customer's partition no compensation would ever drop it.
		return c.OrderID, true
	}
	return "", false
}

// applyDLQ handles the dead-letter commands, parks a forward step while
// the fault is on, and drops the parked entries of an order whose saga
// has ended. nil: apply in as usual.
func (m *Machine) applyDLQ(in *engine.Input, now int64, fx *engine.Effects) *Result {
	switch c := in.Cmd.(type) {
	case *SetFault:
		return m.setFault(c)
	case *ReplayDLQ:
		return m.replayDLQ(c, now, fx)
	case *DiscardDLQ:
		return m.discardDLQ(c)
	case *ReleaseForOrder:
		m.dropParked(c.OrderID)
		return nil
	case *RefundForOrder:
		m.dropParked(c.OrderID)
		return nil
	}
	if in.Kind != engine.FromMessage || !m.dlq.fault {
		return nil
	}
	orderID, ok := faultable(in.Cmd)
	if !ok || m.moot(in.Cmd, orderID) {
		return nil
	}
	data, err := in.Cmd.AppendBinary(nil)
	if err != nil {
		return invalid("%v", err)
	}
	m.park(orderID, "fault injected: "+m.dlq.message, data, now)
	return &Result{Outcome: OK, Msg: "parked in the dead-letter queue"}
}

// moot: an answer to a saga that has ended would be ignored, and a payment
// request for an order already refunded would be refused; parking them
// would only leave entries that no end of a saga will ever drop.
func (m *Machine) moot(cmd engine.Command, orderID string) bool {
	switch cmd.(type) {
	case *ReserveForOrder:
		return false
	case *ProcessPaymentForOrder:
		return m.closedOrders[orderID]
	}
	o, _ := m.running(orderID)
	return o == nil
}

func (m *Machine) setFault(c *SetFault) *Result {
	msg := c.Message
	if msg == "" {
		msg = DefaultFaultMessage
	}
	if s := validText("failureMessage", msg, 1, MaxTextLen); s != "" {
		return invalid("%s", s)
	}
	if !c.Enabled {
		msg = ""
	}
	if m.dlq.fault == c.Enabled && m.dlq.message == msg {
		return &Result{Outcome: Same}
	}
	m.dlq.fault, m.dlq.message = c.Enabled, msg
	return &Result{Outcome: OK}
}

func (m *Machine) park(orderID, cause string, data []byte, now int64) {
	d := &m.dlq
	if len(d.entries) >= MaxDLQPerPartition {
		m.removeEntry(0)
		d.stats.Evicted++
	}
	d.entries = append(d.entries, DLQEntry{ID: DLQID(d.part, d.next), Seq: d.next, OrderID: orderID, Cause: cause, FailedAt: now, Data: data})
	d.next++
	d.stats.Parked++
	m.countOrder(orderID)
}

func (m *Machine) countOrder(orderID string) {
	if m.dlq.perOrder == nil {
		m.dlq.perOrder = map[string]int{}
	}
	m.dlq.perOrder[orderID]++
}

func (m *Machine) removeEntry(i int) DLQEntry {
	d := &m.dlq
	e := d.entries[i]
	d.entries = slices.Delete(d.entries, i, i+1)
	if d.perOrder[e.OrderID]--; d.perOrder[e.OrderID] <= 0 {
		delete(d.perOrder, e.OrderID)
	}
	if len(d.entries) == 0 && cap(d.entries) > 1024 {
		d.entries = nil // a burst is over: give its memory back
	}
	return e
}

// dropParked removes every entry of orderID: its saga has ended.
func (m *Machine) dropParked(orderID string) {
	if m.dlq.perOrder[orderID] == 0 {
		return
	}
	for i := 0; i < len(m.dlq.entries); {
		if m.dlq.entries[i].OrderID == orderID {
			m.removeEntry(i)
			m.dlq.stats.Dropped++
			continue
		}
		i++
	}
}

// findEntry returns the index of the entry id, or -1.
func (m *Machine) findEntry(id string) int {
	_, seq, ok := ParseDLQID(id)
	if !ok {
		return -1
	}
	i, found := slices.BinarySearchFunc(m.dlq.entries, seq, func(e DLQEntry, s uint64) int {
		switch {
		case e.Seq < s:
			return -1
		case e.Seq > s:
			return 1
		}
		return 0
	})
	if !found || m.dlq.entries[i].ID != id {
		return -1
	}
	return i
}

func dlqNotFound(id string) *Result {
	return &Result{Outcome: NotFound, Msg: fmt.Sprintf("dead-letter entry %q not found", id)}
}

// replayDLQ applies the parked message as if it had just arrived, and
// removes the entry in the same Apply. While the fault is on it would
// only fail again, so it is refused and the entry stays.
func (m *Machine) replayDLQ(c *ReplayDLQ, now int64, fx *engine.Effects) *Result {
	i := m.findEntry(c.ID)
	if i < 0 {
		return dlqNotFound(c.ID)
	}
	if m.dlq.fault {
		return &Result{Outcome: Conflict, Msg: "fault injection is enabled: turn it off (POST /api/admin/fault?enabled=false) before replaying"}
	}
	cmd, err := Decode(m.dlq.entries[i].Data)
	if err != nil {
		return invalid("%v", err)
	}
	// Removed first: the step may end its saga, which drops the order's
	// other entries and must not find this one.
	e := m.removeEntry(i)
	res := m.apply(&engine.Input{Kind: engine.FromMessage, TimeNs: now, Cmd: cmd}, now, fx)
	if res.Outcome == Invalid {
		// Nothing was changed or sent: the entry stays for another try.
		m.dlq.entries = slices.Insert(m.dlq.entries, i, e)
		m.countOrder(e.OrderID)
		return res
	}
	m.dlq.stats.Replayed++
	return &Result{Outcome: OK, Msg: res.Msg, Order: res.Order, Saga: res.Saga}
}

func (m *Machine) discardDLQ(c *DiscardDLQ) *Result {
	i := m.findEntry(c.ID)
	if i < 0 {
		return dlqNotFound(c.ID)
	}
	m.removeEntry(i)
	m.dlq.stats.Discarded++
	return &Result{Outcome: OK}
}

// Queries of the dead-letter queue; each answers from one partition.
type (
	// ListDLQ: the oldest Limit entries (all if Limit <= 0).
	ListDLQ  struct{ Limit int }
	GetDLQ   struct{ ID string }
	StatsDLQ struct{}
)

func (m *Machine) queryDLQ(q any) (any, bool) {
	switch q := q.(type) {
	case *ListDLQ:
		n := len(m.dlq.entries)
		if q.Limit > 0 {
			n = min(n, q.Limit)
		}
		return slices.Clone(m.dlq.entries[:n]), true
	case *GetDLQ:
		if i := m.findEntry(q.ID); i >= 0 {
			e := m.dlq.entries[i]
			return &e, true
		}
		return (*DLQEntry)(nil), true
	case *StatsDLQ:
		s := m.dlq.stats
		s.Count, s.Fault, s.FaultMessage = len(m.dlq.entries), m.dlq.fault, m.dlq.message
		return &s, true
	}
	return nil, false
}

// codeDLQ writes the dead-letter state (snapshot version 4 on), or reads
// it back and checks it: entries in rising Seq order, all below next.
func (m *Machine) codeDLQ(c *wire.Coder) error {
	d := &m.dlq
	c.Bool(&d.fault)
	c.Str(&d.message)
	c.U64(&d.next)
	for _, p := range []*uint64{&d.stats.Parked, &d.stats.Replayed, &d.stats.Discarded, &d.stats.Evicted, &d.stats.Dropped} {
		c.U64(p)
	}
	n := c.Count(len(d.entries), 6)
	if c.Reading() {
		d.entries = make([]DLQEntry, n)
	}
	for i := range d.entries {
		e := &d.entries[i]
		c.U64(&e.Seq)
		c.Str(&e.OrderID, &e.Cause)
		c.I64(&e.FailedAt)
		data := string(e.Data)
		c.Str(&data)
		if !c.Reading() {
			continue
		}
		e.Data, e.ID = []byte(data), DLQID(d.part, e.Seq)
		if c.R.Err != nil {
			return nil
		}
		if e.Seq >= d.next || (i > 0 && e.Seq <= d.entries[i-1].Seq) {
			return fmt.Errorf("commerce: snapshot dead-letter entry %d out of order", e.Seq)
		}
		if _, err := Decode(e.Data); err != nil {
			return fmt.Errorf("commerce: snapshot dead-letter entry %d: %w", e.Seq, err)
		}
		m.countOrder(e.OrderID)
	}
	return nil
}

// fork copies the dead-letter state for ForkSnapshot: entries are
// never changed in place, so a copy of the slice is enough.
func (d *dlq) fork() dlq {
	f := *d
	f.entries = slices.Clone(d.entries)
	f.perOrder = nil // the encoding does not read it
	return f
}

// keepPartition gives back the partition number Restore's reset cleared:
// it is the engine's, not part of the snapshot.
func (m *Machine) keepPartition(part int) {
	m.dlq.part = part
	for i := range m.dlq.entries {
		m.dlq.entries[i].ID = DLQID(part, m.dlq.entries[i].Seq)
	}
}

// newMachineAt is an empty partition that knows its number, which names
// its dead-letter entries.
func newMachineAt(partition int) *Machine {
	m := NewMachine()
	m.dlq.part = partition
	return m
}
