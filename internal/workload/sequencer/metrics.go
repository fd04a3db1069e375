package sequencer

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
)

// Limits of the sequencer's metrics.
const (
	// MaxGroupSeries bounds the groups that get series of their own: the
	// ones furthest behind (oldest unreleased message, then most
	// unreleased messages, then name) at each scrape. The others are
	// added up under group="_other", which is always exported.
	MaxGroupSeries = 20
	// LagScanSlots bounds the seqs read past a client-numbered group's
	// released position to find its oldest unreleased message (a
	// server-numbered group's oldest is the next to release).
	LagScanSlots = 1024
	// metricsScrapeTimeout bounds the queries one scrape makes of the
	// partitions; a busy engine leaves these series out of that scrape.
	metricsScrapeTimeout = 2 * time.Second
)

// OtherGroup labels the groups beyond MaxGroupSeries.
const OtherGroup = "_other"

// GroupLags asks a partition how far behind its groups are (*LagReport),
// at NowNs: its Top groups furthest behind one by one, the rest added
// up. A query: nothing is logged, the partition's loop answers it at
// scrape time and nothing is kept for it between scrapes.
type GroupLags struct {
	Top   int
	NowNs int64
}

// GroupLag is how far behind one group is (or, in LagReport.Rest, the
// groups not listed: the sums, and the largest LagNs).
type GroupLag struct {
	Group string
	// Unreleased counts messages published and not yet released.
	Unreleased int64
	// LagNs is the age of the oldest unreleased message, 0 if none.
	LagNs int64
	// HeldMessages counts, when the next seq to release is missing (a
	// gap a client has not filled), the unreleased messages behind it.
	HeldMessages int64
}

// LagReport answers GroupLags.
type LagReport struct {
	Top  []GroupLag
	Rest GroupLag
	// Idle groups have nothing unreleased; Releasing ones wait for
	// processors; Held ones for a missing seq.
	Idle, Releasing, Held int64
}

func (m *Machine) groupLags(q GroupLags) *LagReport {
	r := &LagReport{}
	var lagging []GroupLag
	for _, g := range m.groups {
		l := g.lag(q.NowNs)
		switch {
		case l.Unreleased == 0:
			r.Idle++
			continue
		case l.HeldMessages > 0:
			r.Held++
		default:
			r.Releasing++
		}
		lagging = append(lagging, l)
	}
	r.Top, r.Rest = topLags(lagging, q.Top)
	return r
}

// lag measures g at now.
func (g *Group) lag(now int64) GroupLag {
	l := GroupLag{Group: g.Name, Unreleased: int64(g.counts[MsgPending] + g.counts[MsgLeased] + g.counts[MsgProcessed])}
	if l.Unreleased == 0 {
		return l
	}
	head := g.at(g.position + 1)
	if head.State == MsgGap {
		l.HeldMessages = l.Unreleased
	}
	scan := uint64(LagScanSlots)
	if g.Mode == ModeServer {
		scan = 1 // numbered in publish order: the head is the oldest
	}
	oldest, found := int64(0), false
	for seq := g.position + 1; seq <= min(g.end, g.position+scan); seq++ {
		if x := g.at(seq); x.State != MsgGap && (!found || x.Created < oldest) {
			oldest, found = x.Created, true
		}
	}
	if found {
		l.LagNs = max(now-oldest, 0)
	}
	return l
}

// furthestBehind orders lags: oldest unreleased message first, then most
// unreleased, then by name (so that the choice is stable).
func furthestBehind(a, b GroupLag) int {
	if c := cmp.Compare(b.LagNs, a.LagNs); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Unreleased, a.Unreleased); c != 0 {
		return c
	}
	return cmp.Compare(a.Group, b.Group)
}

// topLags splits ls into the n furthest behind and the rest added up.
// Entries already named OtherGroup (a partition's rest, or a group a
// client named so) always go to the rest. ls is reordered.
func topLags(ls []GroupLag, n int) (top []GroupLag, rest GroupLag) {
	rest.Group = OtherGroup
	named := ls[:0]
	for _, l := range ls {
		if l.Group == OtherGroup {
			rest.add(l)
		} else {
			named = append(named, l)
		}
	}
	slices.SortFunc(named, furthestBehind)
	k := min(n, len(named))
	for _, l := range named[k:] {
		rest.add(l)
	}
	return named[:k], rest
}

func (r *GroupLag) add(l GroupLag) {
	r.Unreleased += l.Unreleased
	r.HeldMessages += l.HeldMessages
	r.LagNs = max(r.LagNs, l.LagNs)
}

// Collector exports how far behind the groups are at each scrape
// (register it on the server's registry). The figures come from every
// partition, so each node of a cluster exports the whole cluster's.
func (a *API) Collector() prometheus.Collector { return lagCollector{a} }

type lagCollector struct{ a *API }

var (
	groupsDesc = prometheus.NewDesc("surge_sequencer_groups",
		"Sequencer groups by state: idle (nothing unreleased), releasing (messages wait for processors), held (the next seq to release is missing).",
		[]string{"state"}, nil)
	unreleasedDesc = prometheus.NewDesc("surge_sequencer_group_unreleased_messages",
		"Messages published and not yet released, for the groups furthest behind (at most MaxGroupSeries, 20); the rest added up under group=\"_other\".",
		[]string{"group"}, nil)
	lagDesc = prometheus.NewDesc("surge_sequencer_group_lag_seconds",
		"Age of the group's oldest unreleased message, for the groups furthest behind; group=\"_other\": the largest of the rest.",
		[]string{"group"}, nil)
	heldDesc = prometheus.NewDesc("surge_sequencer_group_held_messages",
		"Messages held behind a missing seq (a gap no client has filled yet) for the groups furthest behind; the rest added up under group=\"_other\".",
		[]string{"group"}, nil)
)

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{groupsDesc, unreleasedDesc, lagDesc, heldDesc} {
		ch <- d
	}
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	parts, err := engine.QueryAll[*LagReport](ctx, c.a.eng, WorkloadID, GroupLags{Top: MaxGroupSeries, NowNs: time.Now().UnixNano()})
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	var all []GroupLag
	var t LagReport
	for _, p := range parts {
		all = append(append(all, p.Top...), p.Rest)
		t.Idle += p.Idle
		t.Releasing += p.Releasing
		t.Held += p.Held
	}
	top, rest := topLags(all, MaxGroupSeries)
	gauge := func(d *prometheus.Desc, v float64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, label)
	}
	gauge(groupsDesc, float64(t.Idle), "idle")
	gauge(groupsDesc, float64(t.Releasing), "releasing")
	gauge(groupsDesc, float64(t.Held), "held")
	for _, l := range append(top, rest) {
		gauge(unreleasedDesc, float64(l.Unreleased), l.Group)
		gauge(lagDesc, float64(l.LagNs)/1e9, l.Group)
		gauge(heldDesc, float64(l.HeldMessages), l.Group)
	}
}
