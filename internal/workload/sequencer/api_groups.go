package sequencer

import (
	"context"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Group list page sizes (GET /v1/groups): a group with its 100
// consumers renders to about 16 KB, so a page is at most about 16 MB.
const (
	DefaultListPage = 1000
	MaxListPage     = 1000
)

// listGroups answers a page of groups by name, with a next cursor while
// there are more: it listed every group of every partition at once, which
// is up to 80,000 groups of 100 consumers, a 1.3 GB answer.
func (a *API) listGroups(w http.ResponseWriter, r *http.Request) int {
	p, ok := api.ParsePage(w, r, DefaultListPage, MaxListPage, MaxNameLen)
	if !ok {
		return http.StatusBadRequest
	}
	parts, err := engine.QueryAll[[]*Info](r.Context(), a.eng, WorkloadID, ListGroups{After: p.After, Limit: p.Limit + 1})
	if err != nil {
		return engineError(w, err)
	}
	page, next := api.MergePage(parts, func(in *Info) string { return in.Name }, p.Limit)
	out := struct {
		Groups []groupDTO `json:"groups"`
		Next   string     `json:"next,omitempty"`
	}{Groups: make([]groupDTO, len(page)), Next: next}
	for i, in := range page {
		out.Groups[i] = groupOut(in)
	}
	return writeJSON(w, http.StatusOK, out)
}

func (a *API) groupInfo(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	in, err := a.info(r.Context(), g)
	if err != nil {
		return engineError(w, err)
	}
	if in == nil {
		return api.Error(w, http.StatusNotFound, "no group "+api.Quote(g))
	}
	return writeJSON(w, http.StatusOK, groupOut(in))
}

func (a *API) deleteGroup(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	if _, st := a.dropGroup(r.Context(), w, g); st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"group": g, "deleted": true})
}

// dropGroup deletes a group and stops the benchmark's work on it.
func (a *API) dropGroup(ctx context.Context, w http.ResponseWriter, g string) (*Result, int) {
	res, err := a.dropGroupRaw(ctx, g)
	if err != nil {
		return nil, engineError(w, err)
	}
	return res, refused(w, res)
}
