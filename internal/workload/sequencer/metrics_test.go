package sequencer

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
)

// A group is idle with nothing unreleased, releasing while its next seq
// waits for processors, and held while its next seq is missing; its lag
// is the age of its oldest unreleased message.
func TestGroupLags(t *testing.T) {
	h := one(t, Limits{})
	t0 := h.Now
	h.want(Created, &Publish{Group: "server", MsgID: "a"})
	h.want(Created, &Publish{Group: "idle", MsgID: "a", Seq: 1})
	r := h.want(OK, &Lease{Group: "idle", Processor: "p", Max: 1, LeaseNs: 60e9})
	h.want(OK, &Complete{Group: "idle", Seq: r.Messages[0].Seq, Processor: "p"})
	h.Advance(1e9)
	// Seq 1 is missing: 3 and 2 (the older) wait behind it.
	h.want(Created, &Publish{Group: "held", MsgID: "c", Seq: 3})
	h.Advance(1e9)
	h.want(Created, &Publish{Group: "held", MsgID: "b", Seq: 2})
	h.want(Created, &Publish{Group: "server", MsgID: "b"})
	h.Advance(1e9)
	rep := h.Machines[0].Query(GroupLags{Top: 1, NowNs: h.Now}).(*LagReport)
	if rep.Idle != 1 || rep.Releasing != 1 || rep.Held != 1 {
		t.Fatalf("groups idle %d, releasing %d, held %d; want 1 each", rep.Idle, rep.Releasing, rep.Held)
	}
	// The server group's oldest message is 3 s old, the held group's
	// (seq 3) 2 s: the server group is the one furthest behind.
	want := GroupLag{Group: "server", Unreleased: 2, LagNs: h.Now - t0}
	if len(rep.Top) != 1 || rep.Top[0] != want {
		t.Fatalf("top %+v, want [%+v]", rep.Top, want)
	}
	if rest := (GroupLag{Group: OtherGroup, Unreleased: 2, LagNs: h.Now - t0 - 1e9, HeldMessages: 2}); rep.Rest != rest {
		t.Fatalf("rest %+v, want %+v", rep.Rest, rest)
	}
	// Filling the gap releases nothing yet (2 and 3 are unprocessed) but
	// the group is no longer held.
	h.want(Created, &Publish{Group: "held", MsgID: "a", Seq: 1})
	rep = h.Machines[0].Query(GroupLags{Top: 5, NowNs: h.Now}).(*LagReport)
	if rep.Held != 0 || rep.Releasing != 2 || len(rep.Top) != 2 || rep.Top[1].Group != "held" || rep.Top[1].HeldMessages != 0 || rep.Top[1].Unreleased != 3 {
		t.Fatalf("after the gap was filled: %+v", rep)
	}
	if rep.Rest != (GroupLag{Group: OtherGroup}) {
		t.Fatalf("rest with room for every group: %+v", rep.Rest)
	}
}

// The collector exports at most MaxGroupSeries groups and _other, which
// adds up the rest, whatever groups clients make; a group named _other
// is counted there, not twice.
func TestLagCollectorBoundsGroups(t *testing.T) {
	_, a := newAPIServer(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.Collector())
	ctx := context.Background()
	names := []string{OtherGroup}
	for i := range MaxGroupSeries + 5 {
		names = append(names, fmt.Sprintf("g%02d", i))
	}
	for _, g := range names {
		// Seq 2 without 1: every group is held with one message.
		if _, err := engine.Do[*Result](ctx, a.eng, a.part(g), WorkloadID, &Publish{Group: g, MsgID: "m", Seq: 2}); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = map[string]float64{}
		for _, m := range mf.GetMetric() {
			got[mf.GetName()][m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	held := got["surge_sequencer_group_held_messages"]
	if len(held) != MaxGroupSeries+1 || held[OtherGroup] != float64(len(names)-MaxGroupSeries) {
		t.Fatalf("held messages by group: %v; want %d groups and _other = %d", held, MaxGroupSeries, len(names)-MaxGroupSeries)
	}
	if g := got["surge_sequencer_groups"]; g["held"] != float64(len(names)) || g["idle"] != 0 || g["releasing"] != 0 {
		t.Fatalf("groups by state: %v", g)
	}
	if lag := got["surge_sequencer_group_lag_seconds"]; len(lag) != MaxGroupSeries+1 {
		t.Fatalf("lag series: %v", lag)
	}
}
