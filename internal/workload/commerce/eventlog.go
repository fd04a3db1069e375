package commerce

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/surge-run/surge/internal/wire"
)

// eventLog is one entity's history, encoded back to back in one
// pointer-free buffer, which is also what a snapshot stores. Histories are
// most of what a long run keeps (about ten events per order and its
// payment); as objects they cost an allocation per event and a string per
// field, a quarter of the server's CPU went to the collector scanning
// them, and they were most of the memory an order costs.
//
// An event is its type, its time as the difference from the previous
// event's, its field count, and its fields' keys and values. Sequence
// numbers are not stored: they rise by one, so the newest's is enough.
// Every string is written as a uvarint x: odd x is eventDict[x/2], even x
// is a literal of x/2 bytes that follow. The names and statuses events
// carry are almost all in the dictionary, so a saga step costs about ten
// bytes instead of fifty.
type eventLog struct {
	buf  []byte
	n    int    // events in buf
	last uint64 // sequence number of the newest event (0: none yet)
	base int64  // time the first event's difference is from
	prev int64  // time of the newest event
}

// eventDict is part of the snapshot format: entries may be appended, never
// changed, moved or removed.
var eventDict = [...]string{
	// event types
	"CustomerCreated", "CustomerUpdated", "CustomerStatusChanged",
	"ProductCreated", "StockReserved", "StockReleased", "StockReplenished",
	"StockCommitted", "OrderCreated", "SagaStep", "SagaStatusChanged",
	"OrderStatusChanged", "StockReservedForOrder", "PaymentRequested",
	"PaymentFailed", "PaymentAuthorized", "PaymentCaptured",
	"PaymentRefunded", "PaymentRefusedForCancelledOrder",
	// field names
	"email", "name", "status", "address", "phone", "from", "to", "reason",
	"sku", "price", "quantityOnHand", "orderId", "quantity", "customerId",
	"total", "step", "productId", "amount", "method", "transactionId",
	// statuses, saga steps, payment methods
	"ACTIVE", "SUSPENDED", "CLOSED", "OUT_OF_STOCK", "PENDING", "CONFIRMED",
	"CANCELLED", "STARTED", "IN_PROGRESS", "COMPLETED", "COMPENSATING",
	"COMPENSATED", "FAILED", "TIMED_OUT", "AUTHORIZED", "CAPTURED",
	"REFUNDED", "ORDER_CREATED", "STOCK_RESERVATION", "COMPENSATION",
	"PAYMENT", "ORDER_CONFIRMATION", "CREDIT_CARD", "DEBIT_CARD",
	"BANK_TRANSFER", "DIGITAL_WALLET",
	// small quantities
	"1", "2", "3",
}

var eventDictIndex = func() map[string]uint64 {
	m := make(map[string]uint64, len(eventDict))
	for i, s := range eventDict {
		if _, dup := m[s]; dup {
			panic("commerce: eventDict holds " + s + " twice")
		}
		m[s] = uint64(i)
	}
	return m
}()

var errCorruptEvents = errors.New("commerce: corrupt event history")

// add appends the event typ at now with kv as field pairs, dropping the
// oldest events down to MaxEventsPerEntity once the log holds twice that
// (in one copy, so the cost per event stays constant).
func (l *eventLog) add(typ string, now int64, kv []string) {
	if l.n >= 2*MaxEventsPerEntity {
		rest, at := l.buf, l.base
		for i := 0; i < l.n-MaxEventsPerEntity; i++ {
			var e Event
			rest, at = readEvent(rest, at, &e, false)
		}
		l.buf = append(make([]byte, 0, 2*len(rest)), rest...)
		l.n, l.base = MaxEventsPerEntity, at
	}
	if l.n == 0 {
		l.base, l.prev = now, now // the first difference is 0: base is its time
	}
	b := appendDictStr(l.buf, typ)
	b = binary.AppendVarint(b, now-l.prev)
	b = binary.AppendUvarint(b, uint64(len(kv)/2))
	for i := 0; i+1 < len(kv); i += 2 {
		b = appendDictStr(b, kv[i])
		b = appendDictStr(b, kv[i+1])
	}
	l.buf, l.prev = b, now
	l.last++
	l.n++
}

// addDecoded appends an event of a version 2 snapshot, which stored each
// event's sequence number: they must rise by one.
func (l *eventLog) addDecoded(e *Event) error {
	if e.Seq == 0 || (l.n > 0 && e.Seq != l.last+1) {
		return fmt.Errorf("%w: sequence number %d after %d", errCorruptEvents, e.Seq, l.last)
	}
	if l.n == 0 {
		l.last = e.Seq - 1
	}
	kv := make([]string, 0, 2*len(e.Fields))
	for _, f := range e.Fields {
		kv = append(kv, f.K, f.V)
	}
	l.add(e.Type, e.At, kv)
	return nil
}

// code writes the log as a version 3 snapshot holds it, or reads and
// validates one.
func (l *eventLog) code(c *wire.Coder) error {
	n := c.Count(l.n, 3)
	c.U64(&l.last)
	c.I64(&l.base)
	buf := l.buf
	c.Bytes(&buf)
	if !c.Reading() || c.R.Err != nil {
		return nil // the caller reports the reader's error
	}
	if n == 0 || l.last < uint64(n) {
		return fmt.Errorf("%w: %d events, newest numbered %d", errCorruptEvents, n, l.last)
	}
	prev, err := checkEvents(buf, n, l.base)
	if err != nil {
		return err
	}
	l.buf, l.n, l.prev = buf, n, prev
	return nil
}

// newest decodes the newest k events (all if k ≥ n), oldest first.
func (l *eventLog) newest(k int) []Event {
	k = min(max(k, 0), l.n)
	out := make([]Event, k)
	rest, at := l.buf, l.base
	seq := l.last - uint64(l.n)
	for i := 0; i < l.n; i++ {
		j := i - (l.n - k)
		var e *Event
		if j >= 0 {
			e = &out[j]
		} else {
			e = &Event{}
		}
		rest, at = readEvent(rest, at, e, j >= 0)
		seq++
		e.Seq = seq
	}
	return out
}

// readEvent decodes the event at the start of b, whose time difference is
// from at, into e (its fields only if fields is set), and returns the rest
// of b and the event's time. b holds events written by add, or validated
// by checkEvents: a failure here is a bug.
func readEvent(b []byte, at int64, e *Event, fields bool) ([]byte, int64) {
	var err error
	if b, e.Type, err = readDictStr(b, true); err != nil {
		panic(err)
	}
	d, n := binary.Varint(b)
	f, m := binary.Uvarint(b[n:])
	b = b[n+m:]
	at += d
	e.At = at
	if fields && f > 0 {
		e.Fields = make([]Field, f)
	}
	for i := range f {
		var k, v string
		b, k, _ = readDictStr(b, fields)
		b, v, _ = readDictStr(b, fields)
		if fields {
			e.Fields[i] = Field{k, v}
		}
	}
	return b, at
}

// checkEvents validates a history read from a snapshot: n whole events
// with dictionary indices and lengths in range and nothing after them. It
// returns the newest event's time.
func checkEvents(b []byte, n int, base int64) (int64, error) {
	at := base
	for i := 0; i < n; i++ {
		var err error
		if b, _, err = readDictStr(b, false); err != nil {
			return 0, err
		}
		d, k := binary.Varint(b)
		if k <= 0 {
			return 0, errCorruptEvents
		}
		b = b[k:]
		at += d
		f, k := binary.Uvarint(b)
		if k <= 0 || f > uint64(len(b)) {
			return 0, errCorruptEvents
		}
		b = b[k:]
		for range 2 * f {
			if b, _, err = readDictStr(b, false); err != nil {
				return 0, err
			}
		}
	}
	if len(b) != 0 {
		return 0, fmt.Errorf("%w: %d bytes after %d events", errCorruptEvents, len(b), n)
	}
	return at, nil
}

func appendDictStr(b []byte, s string) []byte {
	if i, ok := eventDictIndex[s]; ok {
		return binary.AppendUvarint(b, 2*i+1)
	}
	b = binary.AppendUvarint(b, 2*uint64(len(s)))
	return append(b, s...)
}

// readDictStr reads a string written by appendDictStr; a literal is
// copied only if keep is set.
func readDictStr(b []byte, keep bool) ([]byte, string, error) {
	x, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, "", errCorruptEvents
	}
	b = b[n:]
	if x&1 == 1 {
		if x/2 >= uint64(len(eventDict)) {
			return nil, "", fmt.Errorf("%w: dictionary entry %d of %d", errCorruptEvents, x/2, len(eventDict))
		}
		return b, eventDict[x/2], nil
	}
	if x/2 > uint64(len(b)) {
		return nil, "", errCorruptEvents
	}
	if !keep {
		return b[x/2:], "", nil
	}
	return b[x/2:], string(b[:x/2]), nil
}
