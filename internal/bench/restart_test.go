package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// The restart bench reads the last start's recovery line from the server
// log, which holds every start of the data dir.
func TestRecoveryLineTakesTheLastStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.log")
	log := `time=2026-11-26T03:29:25.681Z level=INFO msg=recovered partitions=8 replayed_records=0 from=0 took=2ms delivered_messages_dropped=0
time=2026-11-26T03:29:31.642Z level=INFO msg="surge serving" addr=127.0.0.1:43435
time=2026-11-26T03:30:25.681Z level=INFO msg=recovered partitions=8 replayed_records=230696 from=0 took=1.25s delivered_messages_dropped=17
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, secs := recoveryLine(path)
	if n != 230696 || secs != 1.25 {
		t.Fatalf("recoveryLine = %d records, %v s; want 230696, 1.25", n, secs)
	}
	// An older build's line has no took=.
	old := "time=2026-11-26T03:29:25.681Z level=INFO msg=recovered partitions=8 replayed_records=807303 from=0\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, secs := recoveryLine(path); n != 807303 || secs != -1 {
		t.Fatalf("recoveryLine = %d records, %v s; want 807303, -1 (not logged)", n, secs)
	}
}
