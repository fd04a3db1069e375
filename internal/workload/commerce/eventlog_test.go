package commerce

import (
	"fmt"
	"math/rand/v2"
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
				kv = append(kv, k, v)
				fields = append(fields, Field{k, v})
			}
			at := rng.Int64() - rng.Int64()
			typ := fmt.Sprint("T", rng.IntN(300))
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
		// Snapshot round trip: count, then the buffer as written.
		w := wire.Writer{}
		wc := &coder{w: &w}
		wc.count(l.n, 4)
		w.B = append(w.B, l.buf...)
		r := wire.Reader{B: w.B}
		rc := &coder{r: &r}
		var back eventLog
		for n := rc.count(0, 4); n > 0; n-- {
			var e Event
			e.code(rc)
			if err := back.addDecoded(&e); err != nil {
				t.Fatal(err)
			}
		}
		if r.Err != nil || len(r.B) != 0 {
			t.Fatalf("seed %d: snapshot read: %v, %d bytes left", seed, r.Err, len(r.B))
		}
		if back.n != l.n || back.last != l.last || string(back.buf) != string(l.buf) {
			t.Fatalf("seed %d: snapshot round trip differs", seed)
		}
	}
}

// TestEventLogRejectsFallingSequence: a snapshot whose history goes back
// in sequence is corrupt, not a history.
func TestEventLogRejectsFallingSequence(t *testing.T) {
	var l eventLog
	if err := l.addDecoded(&Event{Seq: 5, Type: "A"}); err != nil {
		t.Fatal(err)
	}
	if err := l.addDecoded(&Event{Seq: 5, Type: "B"}); err == nil {
		t.Fatal("a repeated sequence number was accepted")
	}
}
