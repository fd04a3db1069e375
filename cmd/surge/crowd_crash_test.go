package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/bench"
)

// Shape of TestKill9MidFlashCrowd: the peer's 5 groups, every reservation
// at once, 8 areas per group so that about half the reservations get
// seats (the peer's ratio would fail nine in ten, leaving few seats to
// check for double booking), and the kill once 500 of the 15,000 have their
// decision: on progress, not time, so it lands early in the crowd (a
// few thousand ids out, most POSTs still to answer) whatever the
// machine's speed.
const (
	flashCrowdPerGroup  = 3000
	flashCrowdAreas     = 8
	flashCrowdKillAfter = 500
)

// TestKill9MidFlashCrowd is issue 18's "nothing lost, nothing double" at
// flash-crowd scale: `surge bench ticketing --crowd --kill-after-decisions`
// against the real server, killed with SIGKILL in the middle of 5 × 3,000
// reservations started at once and restarted on the same data dir and
// address while the crowd's clients retry. Every id any POST returned must
// read back from the restarted server RESERVED with seats that fit its
// request, or FAILED, exactly as the crowd's GET saw it, and no seat may
// be held twice; no reservation may end in an error.
func TestKill9MidFlashCrowd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildSurge(t)
	jsonPath := filepath.Join(t.TempDir(), "crowd.json")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"ticketing", "--crowd", "--baseline=false", "--serve-exe", bin, "--json", jsonPath,
		"-n", strconv.Itoa(flashCrowdPerGroup), "-a", strconv.Itoa(flashCrowdAreas), "--kill-after-decisions", strconv.Itoa(flashCrowdKillAfter)})
	err := cmd.ExecuteContext(ctx)
	b, rerr := os.ReadFile(jsonPath)
	if err != nil || rerr != nil {
		t.Fatalf("bench: %v (report: %v)\n%s", err, rerr, out.String())
	}
	var rep bench.CrowdReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	s := rep.Server
	if !rep.OK || s == nil || s.Crash == nil {
		t.Fatalf("report not OK: %v\n%s", rep.Problems, out.String())
	}
	k := s.Crash
	if !k.Killed || k.DecisionsAtKill < flashCrowdKillAfter || k.RestartSeconds <= 0 {
		t.Fatalf("kill %+v: want it after %d decisions, then a restart", k, flashCrowdKillAfter)
	}
	const all = 5 * flashCrowdPerGroup
	if s.Reservations != all || s.Errors != 0 || len(s.DoubleBookings) != 0 {
		t.Fatalf("crowd: %d reservations, %d errors %v, %d double bookings; want %d, none, none",
			s.Reservations, s.Errors, s.ErrorsByKind, len(s.DoubleBookings), all)
	}
	// Every reservation got an id, and each reads back as the crowd saw it.
	if k.IDsChecked != all || k.ReadReserved != s.Reserved || k.ReadFailed != s.Failed {
		t.Errorf("read back %d ids (%d RESERVED, %d FAILED), the crowd saw %d RESERVED and %d FAILED of %d",
			k.IDsChecked, k.ReadReserved, k.ReadFailed, s.Reserved, s.Failed, all)
	}
	if k.LostIDs != 0 || k.Unreadable != 0 || k.ChangedAnswers != 0 || k.WrongSeats != 0 || len(k.DoubleBookings) != 0 {
		t.Errorf("after kill -9: %d lost, %d unreadable, %d changed, %d wrong seats, %d double bookings (e.g. %v)",
			k.LostIDs, k.Unreadable, k.ChangedAnswers, k.WrongSeats, len(k.DoubleBookings), k.Samples)
	}
	t.Logf("killed at %.1f s after %d decisions (%d ids out); restart %.2f s, replayed %d records; %d ids read back, %d RESERVED, %d FAILED",
		k.KilledAtSeconds, k.DecisionsAtKill, k.IDsAtKill, k.RestartSeconds, k.ReplayedRecords, k.IDsChecked, k.ReadReserved, k.ReadFailed)
}
