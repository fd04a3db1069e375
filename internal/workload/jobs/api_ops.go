package jobs

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Operator reads (docs/API.md, Operator reads): every queue with its
// counts and its submit→start latency.

// The submit→start latency of a queue is taken over the newest
// StartLatencySamples jobs that have started, among the newest
// StartLatencyScan jobs the queue holds: a bounded look however many
// jobs wait.
const (
	StartLatencySamples = 1000
	StartLatencyScan    = 10_000
)

// OpsQueues asks a partition for its queues with their latency.
type OpsQueues struct{}

// QueueOps is one queue as the operator reads show it.
type QueueOps struct {
	Stats   Stats
	Paused  bool
	Samples int
	// P50, P95 and Max are the submit→start latency in ns.
	P50, P95, Max int64
}

func opsWireTypes() []any { return []any{OpsQueues{}, []QueueOps{}} }

// opsQuery answers the operator reads' queries (nil for any other).
func (m *Machine) opsQuery(q any) any {
	if _, ok := q.(OpsQueues); !ok {
		return nil
	}
	out := make([]QueueOps, 0, len(m.queues))
	for _, qu := range m.queues {
		o := QueueOps{Stats: *qu.stats(), Paused: qu.Paused}
		o.Samples, o.P50, o.P95, o.Max = qu.startLatency()
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b QueueOps) int { return strings.Compare(a.Stats.Queue, b.Stats.Queue) })
	return out
}

// startLatency is the submit→start latency of the queue's newest started
// jobs (see StartLatencySamples).
func (q *Queue) startLatency() (n int, p50, p95, max int64) {
	var lat []int64
	for i, seen := len(q.order)-1, 0; i >= 0 && seen < StartLatencyScan && len(lat) < StartLatencySamples; i-- {
		r := q.order[i]
		if r.seq == 0 {
			continue
		}
		seen++
		created, started := r.created, r.started
		if r.j != nil {
			created, started = r.j.CreatedAt, r.j.StartedAt
		}
		if started > 0 {
			lat = append(lat, max64(started-created, 0))
		}
	}
	if len(lat) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(lat)
	at := func(p float64) int64 { return lat[int(p*float64(len(lat)-1))] }
	return len(lat), at(0.50), at(0.95), lat[len(lat)-1]
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// RegisterOps adds the operator reads' HTTP routes to mux.
func (a *API) RegisterOps(mux *http.ServeMux, m *api.Metrics) {
	// Every queue of every partition (up to 1,000 each), each looking at
	// up to StartLatencyScan jobs on its partition's goroutine: a few
	// tens of ms of a partition per list, and megabytes of answer. As
	// many at once as the server has cores, as the other workloads'
	// large lists.
	m.Handle(mux, "GET /v1/ops/jobs/queues", func(w http.ResponseWriter, r *http.Request) int {
		return a.opsTurns.Serve(w, r, a.opsQueues, "too many queue lists are being built or sent")
	})
}

type latencyDTO struct {
	Samples int      `json:"samples"`
	P50Ms   *float64 `json:"p50Ms,omitempty"`
	P95Ms   *float64 `json:"p95Ms,omitempty"`
	MaxMs   *float64 `json:"maxMs,omitempty"`
}

type queueOpsDTO struct {
	Name          string     `json:"name"`
	Paused        bool       `json:"paused"`
	Pending       int64      `json:"pending"`
	Assigned      int64      `json:"assigned"`
	Running       int64      `json:"running"`
	Failed        int64      `json:"failed"`
	Done          int64      `json:"done"`
	DeadLettered  int64      `json:"deadLettered"`
	Processed     int64      `json:"processed"`
	AvgDurationMs float64    `json:"avgDurationMs"`
	ErrorRate     float64    `json:"errorRate"`
	StartLatency  latencyDTO `json:"startLatency"`
}

func nsToMs(ns int64) *float64 {
	v := float64(ns) / 1e6
	return &v
}

func (a *API) opsQueues(w http.ResponseWriter, r *http.Request) int {
	parts, err := engine.QueryAll[[]QueueOps](r.Context(), a.eng, WorkloadID, OpsQueues{})
	if err != nil {
		return api.EngineError(w, err, "server is busy: retry after the Retry-After pause")
	}
	out := struct {
		Queues []queueOpsDTO `json:"queues"`
	}{Queues: []queueOpsDTO{}}
	for _, p := range parts {
		for _, q := range p {
			s := q.Stats
			d := queueOpsDTO{Name: s.Queue, Paused: q.Paused, Pending: s.Pending, Assigned: s.Assigned, Running: s.Running,
				Failed: s.Failed, Done: s.Done, DeadLettered: s.DeadLettered, Processed: s.Processed,
				AvgDurationMs: s.AvgDurationMs, ErrorRate: s.ErrorRate, StartLatency: latencyDTO{Samples: q.Samples}}
			if q.Samples > 0 {
				d.StartLatency.P50Ms, d.StartLatency.P95Ms, d.StartLatency.MaxMs = nsToMs(q.P50), nsToMs(q.P95), nsToMs(q.Max)
			}
			out.Queues = append(out.Queues, d)
		}
	}
	slices.SortFunc(out.Queues, func(a, b queueOpsDTO) int { return strings.Compare(a.Name, b.Name) })
	body, err := json.Marshal(&out)
	if err != nil {
		return api.Error(w, http.StatusInternalServerError, err.Error())
	}
	api.Write(w, http.StatusOK, true, append(body, '\n'))
	return http.StatusOK
}
