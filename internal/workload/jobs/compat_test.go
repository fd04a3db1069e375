package jobs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// TestOldEncodingsLoad: a log and a snapshot written by the build before
// lease sessions (testdata/compat/v1, by TestWriteCompatData) still load:
// every record decodes and re-encodes to its own bytes, replaying the log
// and restoring the snapshot give the same state, and that state's
// leases (which have no session) are settled by a new stream like any
// other.
func TestOldEncodingsLoad(t *testing.T) {
	dir := filepath.Join("testdata", "compat", "v1")
	js, err := os.ReadFile(filepath.Join(dir, "log.json"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []compatRecord
	if err := json.Unmarshal(js, &recs); err != nil {
		t.Fatal(err)
	}
	snap, err := os.ReadFile(filepath.Join(dir, "snapshot.bin"))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{OwnsDefault: true}
	replayed := NewMachine(opts)
	for i, rec := range recs {
		data, err := base64.StdEncoding.DecodeString(rec.Data)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := Decode(data)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if again, _ := cmd.AppendBinary(nil); !bytes.Equal(again, data) {
			t.Fatalf("record %d (%T) re-encodes to %x, was %x", i, cmd, again, data)
		}
		replayed.Apply(&engine.Input{Kind: engine.InputKind(rec.Kind), TimeNs: rec.At, TimerID: rec.TimerID, Cmd: cmd}, new(engine.Effects))
	}
	restored := NewMachine(opts)
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	want := replayed.AppendSnapshot(nil)
	if got := restored.AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Fatal("the v1 snapshot restores to another state than replaying the v1 log")
	}
	// The same state as this build makes of the same commands.
	if got := compatRun(t).Machines[0].AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Fatal("the v1 log replays to another state than this build reaches with the same commands")
	}
	held := restored.Query(WorkerJobs{Worker: "w4"}).([]string)
	if len(held) == 0 {
		t.Fatal("the testdata should leave jobs leased to w4")
	}
	now := recs[len(recs)-1].At
	fx := new(engine.Effects)
	restored.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: &Reclaim{Worker: "w4", Session: "s-new", LeaseNs: 30e9, Declared: true}}, fx)
	if r := fx.Replied().(*Result); r.Outcome != OK || len(r.Jobs) != 0 {
		t.Fatalf("reclaim of w4's pre-session leases: %+v", r)
	}
	if left := restored.Query(WorkerJobs{Worker: "w4"}).([]string); len(left) != 0 {
		t.Fatalf("w4 still holds %v after a new stream declared none", left)
	}
}
