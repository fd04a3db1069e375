package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// forgetNewest drops the k reservations the fake stored last: a server
// that answered POSTs before their decision was durable, killed. Only
// stored ones count: a POST may have taken its number and not yet stored
// it (it then stores it after this, and is not lost).
func (f *fakeTicketing) forgetNewest(k int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n := f.seq.Load(); k > 0 && n > 0; n-- {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
		if _, ok := f.res[id]; ok {
			delete(f.res, id)
			k--
		}
	}
}

// failAll turns every RESERVED reservation into FAILED: a restart that
// lost the seats of decisions already read.
func (f *fakeTicketing) failAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, r := range f.res {
		if r.State == "RESERVED" {
			r.State, r.Seats = "FAILED", []Seat{}
			f.res[id] = r
		}
	}
}

// stackSeats moves every RESERVED reservation to the first seats of row
// 0 of its area: a restart that rebuilt the seat map wrong.
func (f *fakeTicketing) stackSeats() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, r := range f.res {
		if r.State == "RESERVED" {
			r.Seats = nil
			for c := range r.NumOfSeats {
				r.Seats = append(r.Seats, Seat{Row: 0, Col: c})
			}
			f.res[id] = r
		}
	}
}

// TestCrowdKillReadsBackEveryID runs the crowd's kill and read-back
// against the fake, whose "restart" does what a broken server would: each
// check must see exactly its fault, and a sound restart must pass them all.
func TestCrowdKillReadsBackEveryID(t *testing.T) {
	const decisions = 50
	cases := []struct {
		name    string
		restart func(f *fakeTicketing) error
		after   int64
		check   func(t *testing.T, k *CrowdCrash)
		problem string // in Problems(); "" for none
	}{
		{name: "sound", restart: func(*fakeTicketing) error { return nil }, check: func(t *testing.T, k *CrowdCrash) {
			if k.IDsChecked != 400 || k.ReadReserved+k.ReadFailed != 400 || k.LostIDs+k.Unreadable+k.ChangedAnswers+k.WrongSeats != 0 || len(k.DoubleBookings) != 0 {
				t.Errorf("read-back %+v, want all 400 ids decided, nothing wrong", k)
			}
		}},
		{name: "lost", restart: func(f *fakeTicketing) error { f.forgetNewest(20); return nil }, problem: "LOST", check: func(t *testing.T, k *CrowdCrash) {
			// All 20 forgotten POSTs are answered, so their ids reach
			// clients and the read-back.
			if k.LostIDs != 20 || k.IDsChecked != 400 {
				t.Errorf("lost %d of %d checked, want 20 of 400 (samples %v)", k.LostIDs, k.IDsChecked, k.Samples)
			}
		}},
		{name: "changed", restart: func(f *fakeTicketing) error { f.failAll(); return nil }, problem: "otherwise than the crowd's GET saw", check: func(t *testing.T, k *CrowdCrash) {
			// The decisions seen before the kill were all RESERVED (1,600
			// seats for at most 1,600 asked).
			if k.ChangedAnswers < decisions || k.LostIDs != 0 {
				t.Errorf("changed %d lost %d, want at least %d changed, none lost (samples %v)", k.ChangedAnswers, k.LostIDs, decisions, k.Samples)
			}
		}},
		{name: "double", restart: func(f *fakeTicketing) error { f.stackSeats(); return nil }, problem: "DOUBLE BOOKING", check: func(t *testing.T, k *CrowdCrash) {
			if len(k.DoubleBookings) == 0 {
				t.Errorf("no double booking found after a restart that gives everyone seat 0,0")
			}
		}},
		{name: "not killed", after: 401, restart: func(*fakeTicketing) error { return nil }, problem: "nothing was tested", check: func(t *testing.T, k *CrowdCrash) {
			if k.Killed {
				t.Error("killed, but only 400 decisions could be seen")
			}
		}},
		{name: "no restart", restart: func(*fakeTicketing) error { return errors.New("port taken") }, problem: "port taken", check: func(t *testing.T, k *CrowdCrash) {
			if !k.Killed || k.IDsChecked != 0 {
				t.Errorf("killed %v, %d checked: want killed and no read-back of a server that is gone", k.Killed, k.IDsChecked)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeTicketing()
			after := tc.after
			if after == 0 {
				after = decisions
			}
			kill := &CrowdKill{AfterDecisions: after, Restart: func(context.Context) (CrowdRestart, error) {
				return CrowdRestart{ReadySeconds: 0.5, ReplayedRecords: 7}, tc.restart(f)
			}}
			s := runCrowd(t, CrowdConfig{BaseURL: serve(t, f.handler()), CheckSeats: true, rules: fastRules,
				Groups: 2, Reservations: 200, Areas: 4, Clients: 2, Kill: kill})
			k := s.Crash
			if k == nil {
				t.Fatal("no crash report")
			}
			if k.Killed && k.RestartError == "" && (k.DecisionsAtKill < after || k.IDsAtKill < after || k.RestartSeconds != 0.5 || k.ReplayedRecords != 7) {
				t.Errorf("kill %+v: want it after %d decisions and the restart's figures", k, after)
			}
			tc.check(t, k)
			probs := strings.Join(k.Problems(), "; ")
			if tc.problem == "" && probs != "" || !strings.Contains(probs, tc.problem) {
				t.Errorf("problems %q, want %q", probs, tc.problem)
			}
		})
	}
}

func TestCrowdKillIsValidated(t *testing.T) {
	restart := func(context.Context) (CrowdRestart, error) { return CrowdRestart{}, nil }
	for _, k := range []*CrowdKill{
		{Restart: restart},
		{AfterDecisions: -1, Restart: restart},
		{After: -1, Restart: restart},
		{AfterDecisions: 10},
	} {
		_, err := newCrowd(CrowdConfig{BaseURL: "http://127.0.0.1:1", Groups: 1, Reservations: 1, Areas: 1, Clients: 1,
			PostTimeout: 1, GetTimeout: 1, Kill: k})
		if err == nil {
			t.Errorf("kill %+v accepted", k)
		}
	}
}

func TestCrowdCrashReport(t *testing.T) {
	k := &CrowdCrash{Trigger: "after 500 decisions", Killed: true, KilledAtSeconds: 1.5, DecisionsAtKill: 512, IDsAtKill: 2048,
		RestartSeconds: 0.8, ReplayedRecords: 25620, RecoverySeconds: 0.02, IDsChecked: 100000, ReadReserved: 6392, ReadFailed: 93606,
		LostIDs: 2, DoubleBookings: []DoubleBooking{}, Samples: []string{"x: 404"}}
	rep := &CrowdReport{Benchmark: "ticketing-crowd", Server: &CrowdRun{Server: "surge", CrowdStats: CrowdStats{Crash: k}}}
	var md bytes.Buffer
	writeCrowd(&md, rep)
	for _, want := range []string{"Kill -9 mid-crowd (surge), after 500 decisions", "killed at 1.50 s, with 512 decisions seen and 2,048 ids handed out",
		"healthy 0.80 s after exec (engine recovery 0.02 s, 25,620 records replayed)", "ids read back: 100,000 (RESERVED 6,392, FAILED 93,606)",
		"lost (404): 2;", "e.g. x: 404"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Server struct {
			Crash map[string]any `json:"crash"`
		} `json:"server"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"killedAtSeconds", "restartSeconds", "idsChecked", "lostIds", "changedAnswers", "doubleBookings", "unreadable"} {
		if _, ok := got.Server.Crash[key]; !ok {
			t.Errorf("JSON crash has no %q: %s", key, b)
		}
	}
	if p := k.Problems(); len(p) != 1 || !strings.Contains(p[0], "2 id(s)") {
		t.Errorf("problems %q, want the 2 lost ids", p)
	}
}
