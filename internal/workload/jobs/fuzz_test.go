package jobs

import (
	"bytes"
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
