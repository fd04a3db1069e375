package jobs

import (
	"bytes"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func applyCmd(t *testing.T, m *Machine, now int64, cmd engine.Command) *Result {
	t.Helper()
	// As the engine does: apply what the log holds, decoded from its bytes.
	b, err := cmd.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	fx := new(engine.Effects)
	m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: dec}, fx)
	r, _ := fx.Replied().(*Result)
	if r == nil {
		t.Fatalf("%T: no result", cmd)
	}
	return r
}

// A report with Next leases the queue's next job by priority to the
// stream that held the reported job, in the same command; a report from
// another session (an older stream) leases nothing.
func TestReportLeasesNextForItsStream(t *testing.T) {
	m := NewMachine(Options{OwnsDefault: true})
	for i, prio := range []int32{1, 5, 3} {
		id := []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"}[i]
		if r := applyCmd(t, m, 1, &Submit{JobID: id, Queue: DefaultQueue, Priority: prio}); r.Outcome != Created {
			t.Fatalf("submit: %+v", r)
		}
	}
	first := applyCmd(t, m, 2, &Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 1e9, Session: "s1"})
	if len(first.Jobs) != 1 || first.Jobs[0].Priority != 5 {
		t.Fatalf("lease: %+v", first.Jobs)
	}
	r := applyCmd(t, m, 3, &Report{JobID: first.Jobs[0].ID, Worker: "w", Success: true, Session: "s1", Next: 1, LeaseNs: 1e9})
	if r.Outcome != OK || len(r.Next) != 1 || r.Next[0].Priority != 3 {
		t.Fatalf("report: outcome %v, next %+v; want the priority-3 job", r.Outcome, r.Next)
	}
	j := m.jobs[r.Next[0].ID]
	if j.Status != Assigned || j.Worker != "w" || j.Session != "s1" || j.LeaseUntil != 3+1e9 {
		t.Fatalf("leased by the report: %+v", j)
	}
	r = applyCmd(t, m, 4, &Report{JobID: j.ID, Worker: "w", Success: true, Session: "s0", Next: 1, LeaseNs: 1e9})
	if r.Outcome != OK || len(r.Next) != 0 {
		t.Fatalf("a report from another session: outcome %v, next %+v; want none leased", r.Outcome, r.Next)
	}
	if st := m.queues[DefaultQueue].ready; st[1].len() != 1 {
		t.Fatalf("the priority-1 job should still be ready")
	}
}

// A report without Next keeps the bytes a plain report always had; one
// with Next decodes to itself.
func TestReportLeaseCodec(t *testing.T) {
	plain := &Report{JobID: "j", Worker: "w", Success: true, Result: []byte("r")}
	b, _ := plain.AppendBinary(nil)
	if b[0] != tagReport {
		t.Fatalf("plain report tag %d", b[0])
	}
	with := &Report{JobID: "j", Worker: "w", Success: true, Session: "s", Next: 1, LeaseNs: 7}
	b, _ = with.AppendBinary(nil)
	if b[0] != tagReportLease {
		t.Fatalf("report with a lease: tag %d", b[0])
	}
	dec, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	r := dec.(*Report)
	if r.Session != "s" || r.Next != 1 || r.LeaseNs != 7 || r.JobID != "j" {
		t.Fatalf("decoded %+v", r)
	}
	again, _ := r.AppendBinary(nil)
	if !bytes.Equal(again, b) {
		t.Fatal("re-encoded bytes differ")
	}
}

// A submit with a lease takes the queue's highest-priority ready job for
// the waiting stream (not necessarily the job just submitted), and notes
// the queue ready only while jobs are left for others.
func TestSubmitLeasesByPriority(t *testing.T) {
	m := NewMachine(Options{OwnsDefault: true})
	const old, fresh = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
	applyCmd(t, m, 1, &Submit{JobID: old, Queue: DefaultQueue, Priority: 7})
	fx := new(engine.Effects)
	cmd := &SubmitLease{Submit: Submit{JobID: fresh, Queue: DefaultQueue, Priority: 2}, Worker: "w", Session: "s1", Next: 1, LeaseNs: 1e9}
	b, _ := cmd.AppendBinary(nil)
	dec, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := dec.AppendBinary(nil); !bytes.Equal(again, b) {
		t.Fatal("SubmitLease does not re-encode to its bytes")
	}
	m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 2, Cmd: dec}, fx)
	r := fx.Replied().(*Result)
	if r.Outcome != Created || r.Jobs[0].ID != fresh || len(r.Next) != 1 || r.Next[0].ID != old {
		t.Fatalf("outcome %v, jobs %+v, next %+v; want %s created and %s leased", r.Outcome, r.Jobs, r.Next, fresh, old)
	}
	if j := m.jobs[old]; j.Status != Assigned || j.Session != "s1" {
		t.Fatalf("leased: %+v", j)
	}
	if n := fx.Notes(); len(n) != 1 || n[0] != (QueueReady{Queue: DefaultQueue, Ready: 1}) {
		t.Fatalf("notes %v, want the one job left ready", n)
	}
	fx.Reset()
	m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 3, Cmd: &SubmitLease{Submit: Submit{JobID: "00000000-0000-4000-8000-000000000003", Queue: DefaultQueue}, Worker: "w", Session: "s1", Next: 2, LeaseNs: 1e9}}, fx)
	if r := fx.Replied().(*Result); len(r.Next) != 2 || len(fx.Notes()) != 0 {
		t.Fatalf("next %+v, notes %v; want both ready jobs leased and no note", r.Next, fx.Notes())
	}
}

// A batch with a lease takes up to Next of the queue's ready jobs for the
// stream and notes the rest.
func TestSubmitBatchLeases(t *testing.T) {
	m := NewMachine(Options{OwnsDefault: true})
	cmd := &SubmitBatchLease{SubmitBatch: SubmitBatch{Jobs: []Submit{
		{JobID: "00000000-0000-4000-8000-000000000001", Queue: DefaultQueue, Priority: 1},
		{JobID: "00000000-0000-4000-8000-000000000002", Queue: DefaultQueue, Priority: 9},
		{JobID: "00000000-0000-4000-8000-000000000003", Queue: DefaultQueue, Priority: 5},
	}}, Worker: "w", Session: "s1", Next: 2, LeaseNs: 1e9}
	b, _ := cmd.AppendBinary(nil)
	dec, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := dec.AppendBinary(nil); !bytes.Equal(again, b) {
		t.Fatal("SubmitBatchLease does not re-encode to its bytes")
	}
	fx := new(engine.Effects)
	m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: dec}, fx)
	r := fx.Replied().(*Result)
	if r.Outcome != Created || len(r.Each) != 3 || len(r.Next) != 2 || r.Next[0].Priority != 9 || r.Next[1].Priority != 5 {
		t.Fatalf("outcome %v, %d results, next %+v; want the priority 9 and 5 jobs leased", r.Outcome, len(r.Each), r.Next)
	}
	if n := fx.Notes(); len(n) != 1 || n[0] != (QueueReady{Queue: DefaultQueue, Ready: 1}) {
		t.Fatalf("notes %v, want the one job left ready", n)
	}
}
