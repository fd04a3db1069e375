package commerce

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"

	"github.com/surge-run/surge/internal/wire"
)

// TestEventLogModel checks the encoded history against the plain one it
// replaced: a slice of events trimmed to the newest MaxEventsPerEntity once
// it holds twice as many, with sequence numbers continuing. Every read of
// the newest k, and a round trip through the snapshot encoding, must agree.
func TestEventLogModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var l eventLog
		var model []Event
		adds := rng.IntN(5 * MaxEventsPerEntity)
		for i := 0; i < adds; i++ {
			nf := rng.IntN(4)
			kv := make([]string, 0, 2*nf)
			fields := []Field(nil)
			for f := 0; f < nf; f++ {
				k, v := fmt.Sprint("k", f), fmt.Sprint(rng.Uint64()>>rng.IntN(64))
				if rng.IntN(2) == 0 { // names and statuses come from the dictionary
					k, v = eventDict[rng.IntN(len(eventDict))], eventDict[rng.IntN(len(eventDict))]
				}
				kv = append(kv, k, v)
				fields = append(fields, Field{k, v})
			}
			at := rng.Int64() - rng.Int64()
			typ := fmt.Sprint("T", rng.IntN(300))
			if rng.IntN(2) == 0 {
				typ = eventDict[rng.IntN(len(eventDict))]
			}
			l.add(typ, at, kv)
			if len(model) >= 2*MaxEventsPerEntity {
				model = append([]Event(nil), model[len(model)-MaxEventsPerEntity:]...)
			}
			model = append(model, Event{Seq: uint64(i + 1), Type: typ, At: at, Fields: fields})
			if rng.IntN(200) == 0 {
				k := rng.IntN(len(model) + 2)
				want := model[len(model)-min(k, len(model)):]
				if got := l.newest(k); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("seed %d after %d adds: newest(%d) differs", seed, i+1, k)
				}
			}
		}
		if l.n != len(model) {
			t.Fatalf("seed %d: %d events held, model %d", seed, l.n, len(model))
		}
		// Snapshot round trip.
		w := wire.Writer{}
		if err := l.code(&wire.Coder{W: &w}); err != nil {
			t.Fatal(err)
		}
		r := wire.Reader{B: w.B}
		var back eventLog
		if err := back.code(&wire.Coder{R: &r, Version: snapshotVersion}); err != nil || r.Err != nil || len(r.B) != 0 {
			t.Fatalf("seed %d: snapshot read: %v %v, %d bytes left", seed, err, r.Err, len(r.B))
		}
		if !reflect.DeepEqual(back, l) {
			t.Fatalf("seed %d: snapshot round trip differs", seed)
		}
		// A version 2 snapshot's events, added one by one, give the same log.
		var v2 eventLog
		for _, e := range l.newest(l.n) {
			if err := v2.addDecoded(&e); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(v2.newest(v2.n), l.newest(l.n)) || v2.last != l.last {
			t.Fatalf("seed %d: a log rebuilt from its events differs", seed)
		}
	}
}

// TestEventLogRejectsFallingSequence: a version 2 snapshot whose history
// does not rise by one is corrupt, not a history.
func TestEventLogRejectsFallingSequence(t *testing.T) {
	var l eventLog
	if err := l.addDecoded(&Event{Seq: 5, Type: "A"}); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{5, 4, 7} {
		if err := l.addDecoded(&Event{Seq: seq, Type: "B"}); err == nil {
			t.Fatalf("sequence number %d after 5 was accepted", seq)
		}
	}
	if err := l.addDecoded(&Event{Seq: 6, Type: "B"}); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreVersion2 reads snapshots written by the build before event
// histories were encoded (testdata/v2-snap-*.bin, with every history as
// that build answered it in v2-events.json): the histories must read back
// the same, and again after a round trip through the current version.
func TestRestoreVersion2(t *testing.T) {
	raw, err := os.ReadFile("testdata/v2-events.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]Event
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for p := range 2 {
		v2, err := os.ReadFile(fmt.Sprintf("testdata/v2-snap-%d.bin", p))
		if err != nil {
			t.Fatal(err)
		}
		m := NewMachine()
		if err := m.Restore(v2); err != nil {
			t.Fatalf("partition %d: %v", p, err)
		}
		v3 := m.AppendSnapshot(nil)
		again := NewMachine()
		if err := again.Restore(v3); err != nil {
			t.Fatalf("partition %d: restoring version 3: %v", p, err)
		}
		if !bytes.Equal(again.AppendSnapshot(nil), v3) {
			t.Fatalf("partition %d: version 3 round trip differs", p)
		}
		t.Logf("partition %d: version 2 %d B, version 3 %d B", p, len(v2), len(v3))
		for _, mm := range []*Machine{m, again} {
			for k, l := range mm.events {
				got := l.newest(l.n)
				for i := range got { // JSON gives empty field lists as null
					if len(got[i].Fields) == 0 {
						got[i].Fields = nil
					}
				}
				if !reflect.DeepEqual(got, want[k]) {
					t.Fatalf("partition %d: %s: got %+v, want %+v", p, k, got, want[k])
				}
			}
		}
		seen += len(m.events)
	}
	if seen != len(want) {
		t.Fatalf("%d histories restored, %d written", seen, len(want))
	}
}
