package engine

import (
	"testing"
)

// FuzzReplayRecord: replaying any bytes as a log record never panics; a
// record that cannot be applied is dropped (or refused as coming from a
// newer binary), never half-applied in a way that breaks the snapshot:
// the state after it still round-trips through a snapshot.
func FuzzReplayRecord(f *testing.F) {
	debit, _ := (&simCmd{op: opDebit, id: 1, key: "a", to: "b", amount: 5}).AppendBinary(appendEnvelopeHeader(nil, FromClient, simWL, 1))
	f.Add(debit)
	f.Add(append(appendEnvelopeHeader(nil, FromMessage, simWL, 1), 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, opCredit))
	f.Add(append(appendEnvelopeHeader(nil, FromTimer, simWL, 1), 2, 0, 't', '1'))
	f.Add([]byte{1, 9, 9})
	f.Fuzz(func(t *testing.T, rec []byte) {
		e := &Engine{opts: Options{Partitions: 2, Logger: simQuiet}, workloads: map[uint8]Workload{simWL: simWorkload{}}, log: simQuiet}
		e.parts = []*partition{newPartition(e, 0), newPartition(e, 1)}
		p := e.parts[0]
		_ = p.replay(rec)
		snap := p.appendSnapshot(nil)
		q := newPartition(e, 0)
		if err := q.restoreSnapshot(snap); err != nil {
			t.Fatalf("the state after replaying %x does not restore: %v", rec, err)
		}
		if again := q.appendSnapshot(nil); string(again) != string(snap) {
			t.Fatalf("the state after replaying %x does not round-trip", rec)
		}
	})
}

// FuzzRestoreSnapshot: restoring any bytes as a partition snapshot never
// panics; it succeeds or returns an error.
func FuzzRestoreSnapshot(f *testing.F) {
	e := &Engine{opts: Options{Partitions: 2, Logger: simQuiet}, workloads: map[uint8]Workload{simWL: simWorkload{}}, log: simQuiet}
	e.parts = []*partition{newPartition(e, 0), newPartition(e, 1)}
	p := e.parts[0]
	p.replay(func() []byte {
		b, _ := (&simCmd{op: opDebit, id: 1, key: "a", to: "b", amount: 5}).AppendBinary(appendEnvelopeHeader(nil, FromClient, simWL, 1))
		return b
	}())
	f.Add(p.appendSnapshot(nil))
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q := newPartition(e, 0)
		_ = q.restoreSnapshot(b)
	})
}
