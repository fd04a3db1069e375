package sequencer

import (
	"context"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

func (a *API) listGroups(w http.ResponseWriter, r *http.Request) int {
	parts, err := engine.QueryAll[[]*Info](r.Context(), a.eng, WorkloadID, ListGroups{})
	if err != nil {
		return engineError(w, err)
	}
	out := []groupDTO{}
	for _, infos := range parts {
		for _, in := range infos {
			out = append(out, groupOut(in))
		}
	}
	sortGroups(out)
	return writeJSON(w, http.StatusOK, map[string]any{"groups": out})
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
