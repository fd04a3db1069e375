package sequencer

import (
	"maps"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Operator reads (docs/API.md, Operator reads): groups with their
// released and held positions, the gap that holds each up, and each
// consumer's lag.

// Groups page sizes.
const (
	DefaultGroupsPage = 50
	MaxGroupsPage     = 200
)

// OpsGroups asks a partition for its groups named above After, at most
// Limit, by name.
type OpsGroups struct {
	After string
	Limit int
}

// OpsGroup asks for one group (nil if there is none).
type OpsGroup struct{ Group string }

// GroupOps is a group as the operator reads show it: its Info, and the
// seq after the released position with its state while one is unreleased.
type GroupOps struct {
	Info     Info
	GapSeq   uint64
	GapState State
}

func opsWireTypes() []any { return []any{OpsGroups{}, OpsGroup{}, []GroupOps{}, &GroupOps{}} }

// opsQuery answers the operator reads' queries (nil for any other).
func (m *Machine) opsQuery(q any) any {
	switch q := q.(type) {
	case OpsGroups:
		names := api.Smallest(maps.Keys(m.groups), q.After, q.Limit)
		out := make([]GroupOps, len(names))
		for i, n := range names {
			out[i] = m.groups[n].ops()
		}
		return out
	case OpsGroup:
		if g := m.groups[q.Group]; g != nil {
			o := g.ops()
			return &o
		}
		return (*GroupOps)(nil)
	}
	return nil
}

func (g *Group) ops() GroupOps {
	o := GroupOps{Info: *g.info()}
	if g.last() > g.position {
		o.GapSeq = g.position + 1
		if s := g.at(o.GapSeq); s != nil {
			o.GapState = s.State
		}
	}
	return o
}

func (a *API) registerOps(mux *http.ServeMux, m *api.Metrics) {
	m.Handle(mux, "GET /v1/ops/groups", a.oneOfFew(a.opsGroups))
	m.Handle(mux, "GET /v1/ops/groups/{group}", a.opsGroup)
}

type gapDTO struct {
	Seq   uint64 `json:"seq"`
	State string `json:"state"`
}

type consumerOpsDTO struct {
	Name     string `json:"name"`
	Position uint64 `json:"position"`
	Lag      uint64 `json:"lag"`
}

type groupOpsDTO struct {
	Name       string           `json:"name"`
	Mode       string           `json:"mode"`
	Partition  int              `json:"partition"`
	Released   uint64           `json:"released"`
	Last       uint64           `json:"last"`
	Unreleased uint64           `json:"unreleased"`
	Pending    int              `json:"pending"`
	Leased     int              `json:"leased"`
	Held       int              `json:"held"`
	Gap        *gapDTO          `json:"gap,omitempty"`
	Consumers  []consumerOpsDTO `json:"consumers"`
}

var gapStates = map[State]string{MsgGap: "unpublished", MsgPending: "pending", MsgLeased: "leased", MsgProcessed: "processed", MsgReleased: "released"}

func (a *API) groupOpsOut(o *GroupOps) groupOpsDTO {
	in := &o.Info
	d := groupOpsDTO{Name: in.Name, Mode: in.Mode.String(), Partition: a.part(in.Name), Released: in.Position, Last: in.Last,
		Pending: in.Pending, Leased: in.Leased, Held: in.Processed, Consumers: make([]consumerOpsDTO, len(in.Consumers))}
	if in.Last > in.Position {
		d.Unreleased = in.Last - in.Position
	}
	if o.GapSeq != 0 {
		d.Gap = &gapDTO{Seq: o.GapSeq, State: gapStates[o.GapState]}
	}
	for i, c := range in.Consumers {
		d.Consumers[i] = consumerOpsDTO{Name: c.Name, Position: c.Position}
		if in.Position > c.Position {
			d.Consumers[i].Lag = in.Position - c.Position
		}
	}
	return d
}

func (a *API) opsGroups(w http.ResponseWriter, r *http.Request) int {
	p, ok := api.ParsePage(w, r, DefaultGroupsPage, MaxGroupsPage, MaxNameLen)
	if !ok {
		return http.StatusBadRequest
	}
	parts, err := engine.QueryAll[[]GroupOps](r.Context(), a.eng, WorkloadID, OpsGroups{After: p.After, Limit: p.Limit + 1})
	if err != nil {
		return engineError(w, err)
	}
	page, next := api.MergePage(parts, func(g GroupOps) string { return g.Info.Name }, p.Limit)
	out := struct {
		Groups []groupOpsDTO `json:"groups"`
		Next   string        `json:"next,omitempty"`
	}{Groups: make([]groupOpsDTO, len(page)), Next: next}
	for i := range page {
		out.Groups[i] = a.groupOpsOut(&page[i])
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) opsGroup(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	o, err := engine.Query[*GroupOps](r.Context(), a.eng, a.part(g), WorkloadID, OpsGroup{Group: g})
	if err != nil {
		return engineError(w, err)
	}
	if o == nil {
		return api.Error(w, http.StatusNotFound, "no group "+api.Quote(g))
	}
	return writeJSON(w, http.StatusOK, a.groupOpsOut(o))
}
