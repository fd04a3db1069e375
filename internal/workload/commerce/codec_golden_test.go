package commerce

import (
	"bytes"
	"encoding"
	"os"
	"testing"

	"github.com/surge-run/surge/internal/wire/wiretest"
)

// TestCodecGolden: the commands and a snapshot as the build before the
// shared wire.Coder wrote them (testdata/golden) are what this build
// writes for the same values, and read back to their own bytes.
func TestCodecGolden(t *testing.T) {
	var cmds []encoding.BinaryAppender
	for _, c := range sampleCommands() {
		cmds = append(cmds, c)
	}
	cmds = append(cmds, &ClaimSKU{ID: "p2", SKU: "S2", Name: "Ink", PriceCents: 1, OnHand: -3},
		&CreateOrder{OrderID: "o2", CustomerID: "c9", VerifyCustomer: true, RetentionNs: 1e12},
		&VerifyCustomerForOrder{OrderID: "o2", CustomerID: "c9"}, &CustomerVerified{OrderID: "o2", CustomerID: "c9", Reason: "r"},
		&ReleaseConfirmedOrder{OrderID: "o1", ProductID: "p1", Quantity: 2, Reason: "r"},
		&SetFault{Enabled: true, Message: "m"}, &ReplayDLQ{ID: "dlq-0-1"}, &DiscardDLQ{ID: "dlq-0-2"}, &PurgeSagas{},
		&ProcessPaymentForOrder{OrderID: "o2", CustomerID: "c9", AmountCents: 1100, Method: "CREDIT_CARD", Take: true},
		&CreateOrder{OrderID: "o3", CustomerID: "c9", ClosePayment: true, RetentionNs: 1e12},
		&CreateOrder{OrderID: "o4", CustomerID: "c9", VerifyCustomer: true, ClosePayment: true, RetentionNs: 1e12})
	h := newHarness(t, 1, 1)
	for _, c := range sampleCommands() {
		h.Client("", c)
	}
	h.Drain()
	wiretest.Golden(t, "testdata/golden", cmds, h.Machines[0].AppendSnapshot(nil), wiretest.Codec{
		Decode: Decode,
		Restore: func(b []byte) ([]byte, error) {
			m := NewMachine()
			err := m.Restore(b)
			return m.AppendSnapshot(nil), err
		},
	})
}

// TestSnapshotV4Restores: a snapshot of version 4 (before a saga's
// closePayment), of the golden state, restores to what this build
// writes for that state (its sagas without closePayment).
func TestSnapshotV4Restores(t *testing.T) {
	v4, err := os.ReadFile("testdata/v4-snap.bin")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMachine()
	if err := m.Restore(v4); err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("testdata/golden/snapshot.bin")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.AppendSnapshot(nil), golden) {
		t.Fatal("the version 4 snapshot restores to a state that encodes unlike the golden one")
	}
}
