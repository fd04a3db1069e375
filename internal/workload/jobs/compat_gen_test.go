package jobs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// compatRecord is one logged input in the compatibility testdata.
type compatRecord struct {
	Kind    uint8  `json:"kind"`
	At      int64  `json:"at"`
	TimerID string `json:"timer_id,omitempty"`
	Data    string `json:"data"` // base64 of the command's bytes
}

// compatRun drives a partition through every command the machine logs
// (jobs in every status, leases extended, expired, released), so that the
// log and the snapshot it ends in exercise every encoding.
func compatRun(t testing.TB) *harness {
	h := newHarness(t, 11, 1, Limits{})
	h.Client("", &CreateQueue{Name: "q", MaxRetries: 2, TTLNs: 3600e9})
	for i, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		h.Client("", &Submit{JobID: id, Queue: "q", Priority: int32(i % 3), IdempotencyKey: "k" + id, Payload: []byte(id),
			RetentionNs: 7200e9})
	}
	h.Client("", &SubmitBatch{Jobs: []Submit{{JobID: "i", Queue: "q"}, {JobID: "j", Queue: "q", Priority: 9}}})
	h.Client("", &Submit{JobID: "later", Queue: "q", NotBeforeNs: h.Now + 50e9})
	h.Client("", &Lease{Queue: "q", Worker: "w1", Max: 3, LeaseNs: 30e9})
	h.Client("", &Lease{Queue: "q", Worker: "w2", Max: 3, LeaseNs: 30e9})
	h.Client("", &Ack{JobID: "j", Worker: "w1"})
	h.Advance(10e9)
	h.Client("", &Heartbeat{Worker: "w1", LeaseNs: 30e9})
	h.Client("", &Report{JobID: "j", Worker: "w1", Success: true, Result: []byte("ok")})
	h.Client("", &Report{JobID: "c", Worker: "w1", Success: false, Error: "boom"})
	h.Client("", &Release{Worker: "w2"})
	h.Client("", &Lease{Queue: "q", Worker: "w3", Max: 2, LeaseNs: 30e9})
	h.Advance(35e9) // w1's unreported job and w3's leases expire
	h.Client("", &Cancel{JobID: "a"})
	h.Advance(60e9) // retries, not_before
	h.Client("", &Lease{Queue: "q", Worker: "w4", Max: 2, LeaseNs: 300e9})
	h.Client("", &PauseQueue{Name: "q"})
	h.Client("", &CreateQueue{Name: "gone"})
	h.Client("", &DeleteQueue{Name: "gone"})
	return h
}

// TestWriteCompatData writes the log and snapshot this build produces for
// compatRun into testdata/compat/v<snapshotVersion>, for later builds to
// load (TestOldEncodingsLoad). Run by hand when the encoding changes:
// JOBS_WRITE_COMPAT=1 go test -run TestWriteCompatData ./internal/workload/jobs
func TestWriteCompatData(t *testing.T) {
	if os.Getenv("JOBS_WRITE_COMPAT") == "" {
		t.Skip("set JOBS_WRITE_COMPAT=1 to write testdata/compat")
	}
	h := compatRun(t)
	var recs []compatRecord
	for _, in := range h.Log[0] {
		recs = append(recs, compatRecord{Kind: uint8(in.Kind), At: in.At, TimerID: in.TimerID, Data: base64.StdEncoding.EncodeToString(in.Data)})
	}
	dir := filepath.Join("testdata", "compat", fmt.Sprintf("v%d", snapshotVersion))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := json.MarshalIndent(recs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "snapshot.bin"), h.Machines[0].AppendSnapshot(nil), 0o644); err != nil {
		t.Fatal(err)
	}
}
