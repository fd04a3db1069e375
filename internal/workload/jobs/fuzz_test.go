package jobs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire/wiretest"
)

func seedCommands() []engine.Command {
	return []engine.Command{
		&CreateQueue{Name: "q", MaxRetries: 2, TTLNs: 5e9},
		&DeleteQueue{Name: "q", Force: true},
		&PauseQueue{Name: "q"}, &ResumeQueue{Name: "q"},
		&Submit{JobID: "j1", Queue: "q", Payload: []byte(`{"command":["echo"]}`), Priority: 9, MaxRetries: 1,
			TTLNs: 1e9, NotBeforeNs: -5, IdempotencyKey: "k", RetentionNs: 60e9},
		&Lease{Queue: "q", Worker: "w", Max: 10, LeaseNs: 30e9, Session: "s1"},
		&Lease{Queue: "q", Worker: "w", Max: 10, LeaseNs: 30e9, legacy: true},
		&Extend{Worker: "w", Session: "s1", LeaseNs: 30e9}, &Extend{Worker: "w", LeaseNs: 30e9, Declared: true, JobIDs: []string{"j1", "j2"}},
		&Reclaim{Worker: "w", Session: "s2", LeaseNs: 30e9, Declared: true, Keep: []string{"j1"}},
		&Unsent{Worker: "w", Session: "s1", JobIDs: []string{"j1"}},
		&Ack{JobID: "j1", Worker: "w"}, &Heartbeat{Worker: "w", LeaseNs: 30e9},
		&Report{JobID: "j1", Worker: "w", Success: true, Result: []byte("ok"), Error: "e"},
		&Cancel{JobID: "j1"}, &Retry{JobID: "j1"}, &Release{Worker: "w", JobID: "j1"}, &Release{Worker: "w"},
		&LeaseExpired{JobID: "j1"}, &RetryDue{JobID: "j1"}, &ReadyDue{JobID: "j1"}, &TTLExpired{JobID: "j1"},
		&PurgeJobs{},
		&SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: "q"}, {JobID: "b", Queue: "q", Priority: 3}}},
		&SubmitLease{Submit: Submit{JobID: "j2", Queue: "q"}, Worker: "w", Session: "s1", Next: 2, LeaseNs: 30e9},
		&SubmitBatchLease{SubmitBatch: SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: "q"}}}, Worker: "w", Session: "s1", Next: 1, LeaseNs: 30e9},
		// With the partition's limit of payload bytes.
		&Submit{JobID: "j3", Queue: "q", Payload: []byte("p"), MaxHeldBytes: 128 << 20},
		&SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: "q"}}, MaxHeldBytes: 128 << 20},
		&SubmitLease{Submit: Submit{JobID: "j4", Queue: "q", MaxHeldBytes: 1 << 20}, Worker: "w", Session: "s1", Next: 2, LeaseNs: 30e9},
		&SubmitBatchLease{SubmitBatch: SubmitBatch{Jobs: []Submit{{JobID: "a", Queue: "q"}}, MaxHeldBytes: 1 << 20}, Worker: "w", Session: "s1", Next: 1, LeaseNs: 30e9},
	}
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to the
// same bytes (so a logged record means one command).
func FuzzDecode(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := c.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { wiretest.RoundTrip(t, data, Decode) })
}

// snapshotSeed is a state with jobs in every status.
func snapshotSeed(t testing.TB) []byte {
	h := newHarness(t, 7, 1, Limits{})
	h.Client("", &CreateQueue{Name: "q"})
	for i, id := range []string{"a", "b", "c", "d", "e", "f"} {
		h.Client("", &Submit{JobID: id, Queue: "q", Priority: int32(i), IdempotencyKey: id, Payload: []byte(id)})
	}
	h.Client("", &Submit{JobID: "later", Queue: "q", NotBeforeNs: h.Now + 1e12})
	h.Client("", &Lease{Queue: "q", Worker: "w", Max: 4, LeaseNs: 1e12})
	h.Client("", &Ack{JobID: "f", Worker: "w"})
	h.Client("", &Report{JobID: "e", Worker: "w", Success: true})
	h.Client("", &Report{JobID: "d", Worker: "w", Success: false})
	h.Client("", &Cancel{JobID: "a"})
	return h.Machines[0].AppendSnapshot(nil)
}

// FuzzRestore: no input panics; whatever restores encodes stably, and the
// restored machine survives commands touching its jobs.
func FuzzRestore(f *testing.F) {
	f.Add(snapshotSeed(f))
	f.Add(NewMachine(Options{OwnsDefault: true}).AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMachine(Options{})
		if err := m.Restore(data); err != nil {
			if len(m.jobs) != 0 || m.ended.len() != 0 || len(m.queues) != 0 {
				t.Fatal("a failed restore left state behind")
			}
			return
		}
		snap := m.AppendSnapshot(nil)
		m2 := NewMachine(Options{})
		if err := m2.Restore(snap); err != nil {
			t.Fatalf("re-restore: %v", err)
		}
		if again := m2.AppendSnapshot(nil); !bytes.Equal(again, snap) {
			t.Fatal("snapshot not stable")
		}
		fx := new(engine.Effects)
		now := int64(1e18)
		for id, j := range m.allJobs() {
			for _, c := range []engine.Command{&Ack{JobID: id, Worker: j.Worker},
				&Report{JobID: id, Worker: j.Worker}, &Cancel{JobID: id}, &Retry{JobID: id}} {
				m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: c}, fx)
			}
			for _, c := range []engine.Command{&LeaseExpired{JobID: id}, &ReadyDue{JobID: id}, &TTLExpired{JobID: id}, &RetryDue{JobID: id}} {
				m.Apply(&engine.Input{Kind: engine.FromTimer, TimeNs: now, Cmd: c}, fx)
			}
		}
		for name := range m.queues {
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: &Lease{Queue: name, Worker: "x", Max: 100, LeaseNs: 1}}, fx)
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: &DeleteQueue{Name: name, Force: true}}, fx)
		}
		m.Apply(&engine.Input{Kind: engine.FromTimer, TimeNs: now * 9, Cmd: &PurgeJobs{}}, fx)
	})
}

// A count in a longer form than its value's is refused: a logged record
// must be the one encoding of its command.
func TestDecodeRefusesLongCounts(t *testing.T) {
	if _, err := Decode([]byte{tagSubmitBatch, 0x80, 0x00}); err == nil {
		t.Fatal("a batch count of 0 written in two bytes decoded")
	}
}

// FuzzSubmitIsCanonical: a Submit the machine calls canonical (applied by
// the engine as the API made it, engine.Canonical) encodes to bytes that
// decode, and applying it leaves the same state, reply and effects as
// applying its decoded copy. Two submits go in, the second with the
// first's fields changed, so that a job kept as a record and the spare
// struct it leaves are both seen.
func FuzzSubmitIsCanonical(f *testing.F) {
	f.Add("j1", "q", []byte(`{"command":["echo"]}`), int32(9), int32(1), int64(1e9), int64(-5), "k", int64(60e9), int64(0))
	f.Add("j1", "q", []byte{}, int32(0), int32(0), int64(0), int64(0), "", int64(0), int64(128<<20))
	f.Add("", "nope", []byte(nil), int32(-1), int32(99), int64(-1), int64(5e18), "k", int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, id, queue string, payload []byte, prio, retries int32, ttl, notBefore int64, key string, retention, held int64) {
		orig := &Submit{JobID: id, Queue: queue, Payload: payload, Priority: prio, MaxRetries: retries, TTLNs: ttl,
			NotBeforeNs: notBefore, IdempotencyKey: key, RetentionNs: retention, MaxHeldBytes: held}
		next := *orig
		next.JobID, next.IdempotencyKey, next.Payload = id+"2", key+"2", append(payload, '2')
		live, decoded := NewMachine(Options{OwnsDefault: true}), NewMachine(Options{OwnsDefault: true})
		now := int64(1e15)
		for _, m := range []*Machine{live, decoded} {
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: &CreateQueue{Name: queue}}, new(engine.Effects))
		}
		for _, c := range []*Submit{orig, &next} {
			if !live.Canonical(c) {
				t.Fatal("a Submit is not canonical")
			}
			data, err := c.AppendBinary(nil)
			if err != nil {
				t.Fatal(err)
			}
			dc, err := Decode(data)
			if err != nil {
				t.Fatalf("a canonical Submit does not decode: %v", err)
			}
			if again, _ := dc.AppendBinary(nil); !bytes.Equal(again, data) {
				t.Fatal("decoded copy encodes differently")
			}
			var fxs [2]*engine.Effects
			for i, pair := range []struct {
				m   *Machine
				cmd engine.Command
			}{{live, c}, {decoded, dc}} {
				fxs[i] = new(engine.Effects)
				pair.m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: pair.cmd}, fxs[i])
			}
			a, b := fxs[0].Replied().(*Result), fxs[1].Replied().(*Result)
			if resultText(a) != resultText(b) {
				t.Fatalf("replies differ:\n%+v\n%+v", a, b)
			}
			if fmt.Sprint(fxs[0].Timers(), fxs[0].Notes(), fxs[0].Sends()) != fmt.Sprint(fxs[1].Timers(), fxs[1].Notes(), fxs[1].Sends()) {
				t.Fatal("effects differ")
			}
			if !bytes.Equal(live.AppendSnapshot(nil), decoded.AppendSnapshot(nil)) {
				t.Fatal("states differ")
			}
		}
	})
}

// resultText prints r with its jobs' fields (a nil and an empty payload
// alike, as every encoding of a job has them).
func resultText(r *Result) string {
	s := fmt.Sprintf("%v %q %d %v", r.Outcome, r.Msg, len(r.Each), r.Next)
	for _, j := range r.Jobs {
		s += fmt.Sprintf(" %+v", *j)
	}
	return s
}
