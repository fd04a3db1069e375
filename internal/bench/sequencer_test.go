package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testSeqOptions(target string) SequencerOptions {
	return SequencerOptions{Scenarios: "peer,delays,groups", Messages: 3000, Groups: 4, ProcessingTime: 5, CreationDelay: 1,
		Poll: 5 * time.Millisecond, Timeout: 10 * time.Second, Options: Options{Target: target}}
}

func runSeqAgainst(t *testing.T, f *fakeSequencer, mod func(*SequencerOptions)) (*SequencerReport, string, error) {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	o := testSeqOptions(srv.URL)
	o.JSONPath = filepath.Join(t.TempDir(), "seq.json")
	var out, errOut bytes.Buffer
	o.Stdout, o.Stderr = &out, &errOut
	if mod != nil {
		mod(&o)
	}
	err := RunSequencer(context.Background(), o)
	b, rerr := os.ReadFile(o.JSONPath)
	if rerr != nil {
		t.Fatalf("no JSON report: %v (run: %v)\n%s", rerr, err, out.String())
	}
	var rep SequencerReport
	if jerr := json.Unmarshal(b, &rep); jerr != nil {
		t.Fatal(jerr)
	}
	return &rep, out.String(), err
}

func TestSequencerScenariosAgainstTheFake(t *testing.T) {
	// 3,000 messages at 30 a millisecond: each group takes ≥ 100 ms.
	f := newFakeSequencer(30)
	rep, out, err := runSeqAgainst(t, f, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !rep.OK || len(rep.Scenarios) != 3 {
		t.Fatalf("ok %v, %d scenarios, problems %v", rep.OK, len(rep.Scenarios), rep.Problems)
	}
	for _, s := range rep.Scenarios {
		wantGroups := 1
		if s.Scenario == SeqScenarioGroups {
			wantGroups = 4
		}
		if s.Groups != wantGroups || len(s.PerGroup) != wantGroups || s.Sent != int64(3000*wantGroups) || s.Sequenced != s.Sent || !s.Complete {
			t.Fatalf("%s: %d groups, sent %d, sequenced %d, complete %v", s.Scenario, s.Groups, s.Sent, s.Sequenced, s.Complete)
		}
		// The fake cannot finish a group in under 100 ms; the bench must
		// not say it did. (How soon it notices is speed, not asserted.)
		if s.Seconds < 0.1 || math.Abs(s.PerSecond-float64(s.Sent)/s.Seconds) > 1 {
			t.Errorf("%s: %.3f s, %.0f msg/s", s.Scenario, s.Seconds, s.PerSecond)
		}
		if s.Ordered == nil || !*s.Ordered || s.PollErrors != 0 || s.Polls < 2 {
			t.Errorf("%s: ordered %v, %d polls, %d failed", s.Scenario, s.Ordered, s.Polls, s.PollErrors)
		}
		st, ok := findStage(s.Stages, "created", "sequenced")
		if len(s.Stages) != 5 || !ok || st.P50Ms != 5 || st.P99Ms != 20 || st.AvgMs != 25 || st.MaxMs != 35 {
			t.Errorf("%s: stages %+v", s.Scenario, s.Stages)
		}
		if s.ServerAverageRate == nil || *s.ServerAverageRate != float64(30000*wantGroups) {
			t.Errorf("%s: perfs average %v", s.Scenario, s.ServerAverageRate)
		}
		if s.ServerCPU == nil || s.CPUPerMsgUs == nil || *s.CPUPerMsgUs <= 0 {
			t.Errorf("%s: server CPU %v", s.Scenario, s.ServerCPU)
		}
		if len(s.PerGroup[0].RawStats) == 0 || len(s.PerGroup[0].RawPerfs) == 0 {
			t.Errorf("%s: raw answers not kept", s.Scenario)
		}
	}
	posts, deletes := f.postsSeen()
	if len(posts) != 6 {
		t.Fatalf("%d POSTs, want 1+1+4: %+v", len(posts), posts)
	}
	want := map[string]seqCreate{
		"bench-peer":       {Name: "bench-peer", NumberOfMessages: 3000},
		"bench-delays":     {Name: "bench-delays", NumberOfMessages: 3000, CreationDelay: 1, ProcessingTime: 5},
		"bench-groups-003": {Name: "bench-groups-003", NumberOfMessages: 3000},
	}
	for _, p := range posts {
		if w, ok := want[p.Name]; ok && p != w {
			t.Errorf("POST %+v, want %+v", p, w)
		}
	}
	// Against --target every group is deleted before and after its run.
	for _, name := range []string{"bench-peer", "bench-delays", "bench-groups-000", "bench-groups-003"} {
		n := 0
		for _, d := range deletes {
			if d == name {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%s deleted %d times, want 2", name, n)
		}
	}
	for _, s := range []string{"== peer:", "== delays:", "processingTime 5 ms", "4 groups at once", "created→processing", "isOrdered", "goals (on this machine)", "OK:"} {
		if !strings.Contains(out, s) {
			t.Errorf("readable report lacks %q:\n%s", s, out)
		}
	}
	noTrackerNumbers(t, out)
	// 3,000 messages and 4 groups are not the goals' runs: nothing judged.
	for _, g := range rep.Goals {
		if g.Met != nil {
			t.Errorf("goal %q judged on a run it is not stated for", g.Name)
		}
	}
}

func TestSequencerCatchesDisorderDuplicatesAndStalls(t *testing.T) {
	// The stall is seen when --timeout passes; the others are seen once
	// the fake has sequenced everything, which a busy machine may take
	// far longer than 300 ms to poll.
	for _, c := range []struct {
		name    string
		f       *fakeSequencer
		timeout time.Duration
		want    string
	}{
		{"disorder", &fakeSequencer{perMs: 100, disorder: true}, 30 * time.Second, "out of order in 1 group(s): bench-peer"},
		{"overcount", &fakeSequencer{perMs: 100, overcount: 3}, 30 * time.Second, "count went past what was sent (duplicates) in bench-peer: 3003 of 3000"},
		{"stall", &fakeSequencer{stall: true}, 300 * time.Millisecond, "0 of 3,000 messages sequenced"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.f.groups = map[string]*fakeSeqGroup{}
			rep, out, err := runSeqAgainst(t, c.f, func(o *SequencerOptions) {
				o.Scenarios, o.Timeout = SeqScenarioPeer, c.timeout
			})
			if !errors.Is(err, errSequencerFailed) || rep.OK {
				t.Fatalf("err %v, ok %v\n%s", err, rep.OK, out)
			}
			if !slices.ContainsFunc(rep.Problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Fatalf("problems %q, want one with %q", rep.Problems, c.want)
			}
		})
	}
}

func TestSequencerPeerGoalJudgedOnlyOnThePeersRun(t *testing.T) {
	yes, no := 0.8, 1.5
	for _, c := range []struct {
		msgs int
		secs float64
		met  *bool
	}{{60000, yes, ptr(true)}, {60000, no, ptr(false)}, {1000, yes, nil}} {
		rep := &SequencerReport{Scenarios: []*SeqScenarioReport{{Scenario: SeqScenarioPeer, MessagesPerGroup: c.msgs, Sent: int64(c.msgs), Complete: true, Seconds: c.secs}}}
		rep.judge()
		g := rep.Goals[0]
		if (g.Met == nil) != (c.met == nil) || (g.Met != nil && *g.Met != *c.met) {
			t.Errorf("%d in %.1f s: met %v, want %v", c.msgs, c.secs, g.Met, c.met)
		}
	}
	// The latency goal is at 100,000 msg/s: a run at least that fast under
	// 20 ms meets it; a slower run, or a faster one over it, is no verdict.
	for _, c := range []struct {
		rate, p99 float64
		met       *bool
	}{{250000, 12, ptr(true)}, {250000, 30, nil}, {50000, 12, nil}} {
		rep := &SequencerReport{Scenarios: []*SeqScenarioReport{{Scenario: SeqScenarioGroups, Groups: 64, Complete: true, PerSecond: c.rate,
			Stages: []SeqStage{{Name: "created→sequenced", P99Ms: c.p99}}}}}
		rep.judge()
		rate, lat := rep.Goals[0], rep.Goals[1]
		if rate.Met == nil || *rate.Met != (c.rate >= 200000) {
			t.Errorf("rate %.0f: met %v", c.rate, rate.Met)
		}
		if (lat.Met == nil) != (c.met == nil) || (lat.Met != nil && *lat.Met != *c.met) || lat.Value == nil || *lat.Value != c.p99 {
			t.Errorf("rate %.0f p99 %.0f: met %v value %v, want %v", c.rate, c.p99, lat.Met, lat.Value, c.met)
		}
	}
}

// A run paced by creationDelay at the latency goal's rate is judged on
// latency, not on throughput.
func TestSequencerPacedGroupsRun(t *testing.T) {
	rep := &SequencerReport{Scenarios: []*SeqScenarioReport{{Scenario: SeqScenarioGroups, Groups: 64, CreationDelayMs: 1, Complete: true,
		PerSecond: 97000, Stages: []SeqStage{{Name: "createdToSequenced", P99Ms: 9}}}}}
	rep.judge()
	if g := rep.Goals[0]; g.Met != nil || !strings.Contains(g.Note, "paced") {
		t.Errorf("rate goal judged on a paced run: %+v", g)
	}
	if g := rep.Goals[1]; g.Met == nil || !*g.Met {
		t.Errorf("latency goal at 97,000 msg/s and 9 ms: %+v", g)
	}
}

func ptr[T any](v T) *T { return &v }

func TestSequencerReadsOtherAnswerShapes(t *testing.T) {
	// The peer answers the count as a bare number; stats may come as a list
	// of stages in µs.
	f := newFakeSequencer(100)
	f.bareCount, f.microStats = true, true
	rep, out, err := runSeqAgainst(t, f, func(o *SequencerOptions) { o.Scenarios = SeqScenarioPeer })
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := rep.Scenarios[0]
	st, ok := findStage(s.Stages, "processing", "processed")
	if !ok || st.P50Ms != 2 || st.P99Ms != 8 || st.MaxMs != 14 || st.AvgMs != 10 {
		t.Fatalf("stages %+v", s.Stages)
	}
	if s.Ordered == nil || !*s.Ordered {
		t.Fatalf("ordered %v", s.Ordered)
	}
}

func TestSeqStagesInOrder(t *testing.T) {
	in := []SeqStage{{Name: "createdToSequenced"}, {Name: "queued"}, {Name: "processing_to_processed"}, {Name: "createdToProcessing"}}
	var got []string
	for _, s := range seqStagesInOrder(in) {
		got = append(got, s.Name)
	}
	if want := []string{"created→processing", "processing→processed", "created→sequenced", "queued"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}

func TestParseSeqCountAndStats(t *testing.T) {
	for in, want := range map[string]int64{"42": 42, " 7\n": 7, `{"count":60000}`: 60000, `{"name":"g","sequencedCount":3}`: 3} {
		if n, err := parseSeqCount([]byte(in)); err != nil || n != want {
			t.Errorf("count %q: %d %v, want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "x", `{"name":"g"}`, `[1]`} {
		if _, err := parseSeqCount([]byte(in)); err == nil {
			t.Errorf("count %q: no error", in)
		}
	}
	st, err := parseSeqStats([]byte(`{"createdToSequenced":{"p50Ns":2000000,"p99_s":0.5},"order":{"isOrdered":false,"expected":5,"got":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Stages) != 1 || st.Stages[0].P50Ms != 2 || st.Stages[0].P99Ms != 500 {
		t.Errorf("stages %+v", st.Stages)
	}
	if st.Ordered == nil || *st.Ordered || !strings.Contains(string(st.OrderDetail), `"got":7`) {
		t.Errorf("order %v %s", st.Ordered, st.OrderDetail)
	}
	if _, err := parseSeqStats([]byte(`[]`)); err == nil {
		t.Error("stats that are not an object: no error")
	}
}

func TestSequencerOptionsValidate(t *testing.T) {
	good := testSeqOptions("http://127.0.0.1:1")
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*SequencerOptions){
		"unknown scenario": func(o *SequencerOptions) { o.Scenarios = "peer,fast" },
		"twice":            func(o *SequencerOptions) { o.Scenarios = "peer,peer" },
		"no messages":      func(o *SequencerOptions) { o.Messages = 0 },
		"no groups":        func(o *SequencerOptions) { o.Groups = 0 },
		"negative delay":   func(o *SequencerOptions) { o.ProcessingTime = -1 },
		"no poll":          func(o *SequencerOptions) { o.Poll = 0 },
		"bad target":       func(o *SequencerOptions) { o.Target = "localhost:8080" },
	} {
		o := good
		mod(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
