package commerce

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire/wiretest"
)

func TestParseMoney(t *testing.T) {
	good := map[string]int64{"0": 0, "10": 1000, "10.5": 1050, "10.50": 1050, "0.01": 1, "9.99": 999,
		"2999.99": 299999, "100000000": MaxMoneyCents, "100000000.00": MaxMoneyCents}
	for s, want := range good {
		if got, err := ParseMoney(s); err != nil || got != want {
			t.Errorf("ParseMoney(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "+1", "1.", ".5", "1.234", "01", "00.5", "1e3", "1E2", " 1", "1 ", "1,5",
		"100000000.01", "999999999", "12345678901234567890", "0x10", "NaN", "Infinity", "1.2.3", "١"} {
		if got, err := ParseMoney(s); err == nil {
			t.Errorf("ParseMoney(%q) = %d, want an error", s, got)
		}
	}
}

func TestFormatMoneyAndTax(t *testing.T) {
	for c, want := range map[int64]string{0: "0.00", 1: "0.01", 10: "0.10", 1050: "10.50", -150: "-1.50", MaxMoneyCents: "100000000.00"} {
		if got := FormatMoney(c); got != want {
			t.Errorf("FormatMoney(%d) = %q, want %q", c, got, want)
		}
	}
	// Half-up to the cent: 10 % of 0.05 is 0.005 → 0.01; of 0.04 is 0.004 → 0.00.
	for sub, want := range map[int64]int64{0: 0, 4: 0, 5: 1, 14: 1, 15: 2, 1000: 100, 999: 100, 994: 99} {
		if got := Tax(sub); got != want {
			t.Errorf("Tax(%d) = %d, want %d", sub, got, want)
		}
	}
}

// FuzzParseMoney: whatever is accepted is in range and survives a round
// trip through FormatMoney; every amount in range formats to text that
// parses back to it.
func FuzzParseMoney(f *testing.F) {
	for _, s := range []string{"0", "10.00", "10.5", "1.234", "-1", "01", "1e2", "100000000.00", "100000000.01"} {
		f.Add(s, int64(len(s)))
	}
	f.Fuzz(func(t *testing.T, s string, c int64) {
		if v, err := ParseMoney(s); err == nil {
			if v < 0 || v > MaxMoneyCents {
				t.Fatalf("ParseMoney(%q) = %d: out of range", s, v)
			}
			if back, err := ParseMoney(FormatMoney(v)); err != nil || back != v {
				t.Fatalf("ParseMoney(%q) = %d, but FormatMoney gives %q → %d, %v", s, v, FormatMoney(v), back, err)
			}
			if strings.TrimLeft(strings.Replace(s, ".", "", 1), "0123456789") != "" {
				t.Fatalf("ParseMoney accepted %q", s)
			}
		}
		if c < 0 {
			c = -c
		}
		if c >= 0 {
			c %= MaxMoneyCents + 1
			if back, err := ParseMoney(FormatMoney(c)); err != nil || back != c {
				t.Fatalf("FormatMoney(%d) = %q parses to %d, %v", c, FormatMoney(c), back, err)
			}
		}
	})
}

// FuzzDecode: arbitrary bytes never panic the decoder, and a command it
// accepts encodes to exactly the bytes it was read from (so a logged
// record means one command), which decode to the same command again.
func FuzzDecode(f *testing.F) {
	for _, c := range sampleCommands() {
		data, _ := c.AppendBinary(nil)
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd := wiretest.RoundTrip(t, data, Decode)
		if cmd == nil {
			return
		}
		cmd2, err := Decode(data)
		if err != nil {
			t.Fatalf("%T re-encoded does not decode: %v", cmd, err)
		}
		if !reflect.DeepEqual(cmd, cmd2) {
			t.Fatalf("round trip changed %#v into %#v", cmd, cmd2)
		}
		// Applying any decoded command to an empty partition must not
		// panic either: this is what replay of a strange record does.
		m := NewMachine()
		for _, kind := range []engine.InputKind{engine.FromClient, engine.FromMessage, engine.FromTimer} {
			fx := new(engine.Effects)
			m.Apply(&engine.Input{Kind: kind, Cmd: cmd}, fx)
			if _, ok := fx.Replied().(*Result); !ok {
				t.Fatalf("%T: reply %T", cmd, fx.Replied())
			}
		}
	})
}

// FuzzRestore: a snapshot of arbitrary bytes is refused or restored,
// never a panic, and a restored state encodes to what it was read from.
func FuzzRestore(f *testing.F) {
	h := newHarness(f, 1, 1)
	for _, c := range sampleCommands() {
		h.Client("", c)
	}
	h.Drain()
	f.Add(h.Machines[0].AppendSnapshot(nil))
	f.Add(NewMachine().AppendSnapshot(nil))
	for p := range 2 { // version 2, which Restore still reads
		if b, err := os.ReadFile(fmt.Sprintf("testdata/v2-snap-%d.bin", p)); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMachine()
		if err := m.Restore(data); err != nil {
			return
		}
		again := m.AppendSnapshot(nil)
		m2 := NewMachine()
		if err := m2.Restore(again); err != nil {
			t.Fatalf("a re-encoded snapshot does not restore: %v", err)
		}
		if got := m2.AppendSnapshot(nil); string(got) != string(again) {
			t.Fatal("snapshot encoding is not stable")
		}
	})
}

func TestEveryCommandRoundTrips(t *testing.T) {
	seen := map[byte]bool{}
	for _, c := range sampleCommands() {
		data, err := c.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		seen[data[0]] = true
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%T: decoded %#v, want %#v", c, got, c)
		}
		if _, err := Decode(append(data, 0)); err == nil {
			t.Fatalf("%T: trailing byte accepted", c)
		}
		// A record cut short must be refused, not read as something else.
		for i := range len(data) {
			if _, err := Decode(data[:i]); err == nil {
				t.Fatalf("%T: a prefix of %d of %d bytes decodes", c, i, len(data))
			}
		}
	}
	for tag := byte(tagCreateCustomer); tag <= tagSagaDeadline; tag++ {
		if !seen[tag] {
			t.Errorf("tag %d has no sample command", tag)
		}
	}
}

func sampleCommands() []coded {
	return []coded{
		&CreateCustomer{ID: "c1", Email: "a@b.c", Name: "Ann", Address: "1 Road", Phone: "123"},
		&UpdateCustomer{ID: "c1", Email: "a@b.d", Name: "Ann B", Address: "2 Road", Phone: "456"},
		&SetCustomerStatus{ID: "c1", Status: CustomerSuspended, Reason: "late"},
		&CreateProduct{ID: "p1", SKU: "S1", Name: "Pen", Description: "blue", Category: "office", PriceCents: 999, OnHand: 10},
		&ReserveStock{ProductID: "p1", OrderID: "perftest-1", Quantity: 2},
		&ReleaseStock{ProductID: "p1", OrderID: "perftest-1", Quantity: 1, Reason: "r"},
		&ReplenishStock{ProductID: "p1", Quantity: 5, Reason: "r"},
		&CreateOrder{OrderID: "o1", CustomerID: "c1", Items: []LineItem{{ProductID: "p1", ProductName: "Pen", SKU: "S1", Quantity: 2, UnitPriceCents: 1000}},
			ShippingAddress: "1 Road", CustomerName: "Ann", CustomerEmail: "a@b.c", PaymentMethod: "CREDIT_CARD", DeadlineNs: DefaultDeadline},
		&ConfirmOrder{OrderID: "o1"},
		&CancelOrder{OrderID: "o1", Reason: "r", CancelledBy: "me"},
		&CreatePayment{OrderID: "d1", CustomerID: "c1", AmountCents: 500, Currency: "EUR", Method: "DEBIT_CARD"},
		&RefundPayment{PaymentID: "PAY-d1", Reason: "r"},
		&ReserveForOrder{OrderID: "o1", ProductID: "p1", Quantity: 2},
		&ReleaseForOrder{OrderID: "o1", ProductID: "p1", Reason: "r"},
		&CommitForOrder{OrderID: "o1", ProductID: "p1"},
		&StockReserved{OrderID: "o1", ProductID: "p1"},
		&StockFailed{OrderID: "o1", ProductID: "p1", Reason: "r"},
		&ProcessPaymentForOrder{OrderID: "o1", CustomerID: "c1", AmountCents: 2200, Method: "CREDIT_CARD"},
		&RefundForOrder{OrderID: "o1", Reason: "r"},
		&PaymentProcessed{OrderID: "o1", PaymentID: "PAY-o1"},
		&PaymentFailed{OrderID: "o1", Reason: "r"},
		&SagaDeadline{OrderID: "o1"},
	}
}

// TestFloatArtifactCents: amounts a client computed in binary floating
// point and printed in full mean the nearby whole cents; a real third
// decimal, a negative amount, a huge exponent or anything else is refused.
func TestFloatArtifactCents(t *testing.T) {
	for in, want := range map[string]int64{"19.990000000000002": 1999, "0.30000000000000004": 30, "1e3": 100000, "2.5E1": 2500, "9.989999999999998": 999} {
		if got, ok := floatArtifactCents(in); !ok || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"10.005", "-1.00", "1e999999999", "1/3", "0x10", "", "abc", "1e-3", "100000000.01"} {
		if got, ok := floatArtifactCents(in); ok {
			t.Errorf("%s accepted as %d", in, got)
		}
	}
}

func FuzzFloatArtifactCents(f *testing.F) {
	for _, s := range []string{"19.990000000000002", "1e3", "10.005", "1e99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, ok := floatArtifactCents(s)
		if !ok {
			return
		}
		if c < 0 || c > MaxMoneyCents {
			t.Fatalf("%q gave %d cents", s, c)
		}
		// What ParseMoney accepts, this agrees with.
		if strict, err := ParseMoney(s); err == nil && strict != c {
			t.Fatalf("%q: strict %d, lenient %d", s, strict, c)
		}
	})
}

// FuzzParseWait: ?wait= is accepted only as what the client wrote: a Go
// duration or whole seconds, within MaxWait.
func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"", "10s", "500ms", "10", "61", "-1", "9223372036854775807", "18446744073", "18446744074", "1h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, problem := parseWait(s)
		if problem != "" {
			if d != 0 {
				t.Fatalf("%q refused but gave %v", s, d)
			}
			return
		}
		if d < 0 || d > MaxWait {
			t.Fatalf("%q accepted as %v, outside 0..%v", s, d, MaxWait)
		}
		if want, err := time.ParseDuration(s); err == nil && want != d {
			t.Fatalf("%q accepted as %v, not %v", s, d, want)
		}
		if n, err := strconv.Atoi(s); err == nil {
			if n < 0 || n > int(MaxWait/time.Second) {
				t.Fatalf("%q seconds accepted (as %v), outside 0..%v", s, d, MaxWait)
			}
			if time.Duration(n)*time.Second != d {
				t.Fatalf("%q accepted as %v, not %d s", s, d, n)
			}
		}
	})
}

// FuzzParseDLQID: an entry id parses only in the one form DLQID writes,
// and back to the same numbers; anything else is refused, never a panic.
func FuzzParseDLQID(f *testing.F) {
	for _, s := range []string{"dlq-0-0", "dlq-3-17", "dlq-01-1", "dlq--1-2", "dlq-1-", "dlq-1-2-3", "x", "", "dlq-9999999999999999999-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		part, seq, ok := ParseDLQID(s)
		if !ok {
			return
		}
		if part < 0 || DLQID(part, seq) != s {
			t.Fatalf("ParseDLQID(%q) = %d, %d: DLQID gives %q", s, part, seq, DLQID(part, seq))
		}
	})
}
