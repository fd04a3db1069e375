package server

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
)

// overviewPath is the operator's overview (docs/API.md, Operator reads).
const overviewPath = "GET /v1/admin/overview"

type overview struct {
	Healthy     bool                `json:"healthy"`
	Node        overviewNode        `json:"node"`
	Partitions  []overviewPartition `json:"partitions"`
	Memory      overviewMemory      `json:"memory"`
	GC          overviewGC          `json:"gc"`
	Errors      []recentRecord      `json:"errors"`
	ErrorsTotal int                 `json:"errorsTotal"`
}

type overviewNode struct {
	NodeID        string    `json:"nodeId"`
	Mode          string    `json:"mode"`
	Cluster       string    `json:"cluster"`
	StartedAt     time.Time `json:"startedAt"`
	UptimeSeconds int64     `json:"uptimeSeconds"`
	GoVersion     string    `json:"goVersion"`
	Partitions    int       `json:"partitions"`
}

type overviewPartition struct {
	Partition      int     `json:"partition"`
	Served         bool    `json:"served"`
	Owner          string  `json:"owner,omitempty"`
	QueueDepth     int     `json:"queueDepth"`
	Applied        uint64  `json:"applied"`
	Batches        uint64  `json:"batches"`
	MeanBatch      float64 `json:"meanBatch"`
	RecentBatch    float64 `json:"recentBatch"`
	RecentApplyMs  float64 `json:"recentApplyMs"`
	RecentCommitMs float64 `json:"recentCommitMs"`
	Position       uint64  `json:"position"`
	Lag            *int64  `json:"lag,omitempty"`
}

type overviewMemory struct {
	InUse    uint64   `json:"inUse"`
	Heap     uint64   `json:"heap"`
	Limit    *int64   `json:"limit,omitempty"`
	Fraction *float64 `json:"fraction,omitempty"`
}

type overviewGC struct {
	Cycles      int64      `json:"cycles"`
	LastPauseMs float64    `json:"lastPauseMs"`
	LastAt      *time.Time `json:"lastAt,omitempty"`
	Goroutines  int        `json:"goroutines"`
}

// mountOverview serves GET /v1/admin/overview: any valid token may read
// it, as /v1/cluster.
func (s *Server) mountOverview(m *api.Metrics) {
	s.declare(overviewPath, auth.Route{Need: auth.Need{Role: auth.Any}})
	m.Handle(s.mux, overviewPath, func(w http.ResponseWriter, r *http.Request) int {
		b, err := json.Marshal(s.overview(r))
		if err != nil {
			return api.Error(w, http.StatusInternalServerError, err.Error())
		}
		api.Write(w, http.StatusOK, true, append(b, '\n'))
		return http.StatusOK
	})
}

func (s *Server) overview(r *http.Request) *overview {
	o := &overview{Healthy: s.healthy(), Node: s.overviewNode(), Memory: readMemory(s.memLimit), GC: readGC()}
	o.Partitions = s.overviewPartitions(r)
	o.Errors, o.ErrorsTotal = s.recent.snapshot()
	return o
}

func (s *Server) overviewNode() overviewNode {
	n := overviewNode{Mode: "embedded", StartedAt: s.started.UTC(), GoVersion: runtime.Version(),
		UptimeSeconds: int64(time.Since(s.started) / time.Second), Partitions: s.eng.Partitions()}
	if s.node != nil {
		n.Mode, n.Cluster, n.NodeID = "cluster", s.ccfg.Cluster, s.ccfg.NodeID
		return n
	}
	// As a cluster node names itself by default: hostname-port.
	host, _ := os.Hostname()
	if s.ln != nil {
		if _, port, err := net.SplitHostPort(s.ln.Addr().String()); err == nil {
			host += "-" + port
		}
	}
	n.NodeID = host
	return n
}

func (s *Server) overviewPartitions(r *http.Request) []overviewPartition {
	stats := s.eng.Stats()
	out := make([]overviewPartition, len(stats))
	var owners map[string]string
	var lags map[int]int64
	if s.node != nil {
		owners = map[string]string{}
		for p, m := range s.node.Status().Owners {
			owners[p] = m.NodeID
		}
		lags = s.node.Lags(r.Context())
	}
	self := s.overviewNode().NodeID
	for i, st := range stats {
		p := overviewPartition{Partition: st.Partition, Served: st.Served, QueueDepth: st.QueueDepth,
			Applied: st.Applied, Batches: st.Batches, RecentBatch: round3(st.RecentBatch),
			RecentApplyMs: ms(st.RecentApply), RecentCommitMs: ms(st.RecentCommit), Position: st.Position}
		if st.Batches > 0 {
			p.MeanBatch = round3(float64(st.Applied) / float64(st.Batches))
		}
		switch {
		case s.node == nil:
			p.Owner = self
		case st.Served:
			p.Owner = self
		default:
			p.Owner = owners[strconv.Itoa(st.Partition)]
		}
		if lag, ok := lags[st.Partition]; ok && st.Served {
			p.Lag = &lag
		}
		out[i] = p
	}
	return out
}

func ms(d time.Duration) float64 { return round3(float64(d) / 1e6) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

var memorySamples = []string{
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
}

// readMemory reads the runtime's figures without stopping the world
// (runtime/metrics, unlike runtime.ReadMemStats).
func readMemory(limit int64) overviewMemory {
	samples := make([]metrics.Sample, len(memorySamples))
	for i, n := range memorySamples {
		samples[i].Name = n
	}
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	m := overviewMemory{InUse: v(0) - v(1), Heap: v(2)}
	if limit > 0 && limit != math.MaxInt64 {
		f := round3(float64(m.InUse) / float64(limit))
		m.Limit, m.Fraction = &limit, &f
	}
	return m
}

func readGC() overviewGC {
	var st debug.GCStats
	debug.ReadGCStats(&st)
	g := overviewGC{Cycles: st.NumGC, Goroutines: runtime.NumGoroutine()}
	if len(st.Pause) > 0 {
		g.LastPauseMs = ms(st.Pause[0])
	}
	if !st.LastGC.IsZero() {
		t := st.LastGC.UTC()
		g.LastAt = &t
	}
	return g
}
