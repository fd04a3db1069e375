package sequencer

import (
	"net/http"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Limits of the HTTP API.
const (
	// maxBody: one message of the largest payload with room for its
	// fields; maxBatchBody: a batch of MaxBatch messages.
	maxBody      = MaxPayloadBytes + 64<<10
	maxBatchBody = 8 << 20
	maxSmallBody = 64 << 10
	// MaxMessageBytes bounds a gRPC request message: the HTTP batch
	// body's limit, so a batch fits both.
	MaxMessageBytes = maxBatchBody
	// MaxLeaseBytes bounds the payloads of one lease's answer (Lease
	// MaxBytes), as MaxBatchPayloadBytes bounds a publish's: at least one
	// message is always leased, so a 1 MiB payload is never stuck.
	MaxLeaseBytes = 8 << 20
	// MaxBatchPayloadBytes bounds the sum of a publish batch's payloads
	// (413 / RESOURCE_EXHAUSTED beyond): 1,000 messages of 1 MiB would be
	// one log entry of 1 GB, past cmdlog.MaxEntryBytes. With it the
	// largest batch's command stays under 9 MiB.
	MaxBatchPayloadBytes = 8 << 20
	// MaxWait bounds a long poll's wait.
	MaxWait = 60 * time.Second
	// DefaultMaxWaiters bounds the long polls and streams open at once.
	DefaultMaxWaiters = 10_000
	// DefaultLease is a lease's length when the processor names none.
	DefaultLease = 30 * time.Second
	// MaxLease bounds a lease's length: a dead processor's messages come
	// back within it.
	MaxLease = time.Hour
	// streamPing is how often an idle stream sends a comment, so proxies
	// keep it open.
	streamPing = 15 * time.Second
)

// API serves the sequencer's native routes and the benchmark routes of
// docs/API.md over an engine that runs Workload.
type API struct {
	eng       *engine.Engine
	hub       *Hub
	retention time.Duration
	done      chan struct{}
	stopOnce  sync.Once
	bench     *bench
	// lists holds a turn per group list being built or written
	// (oneOfFew).
	lists *api.Turns
}

// oneOfFew lets as many group lists (GET /v1/groups, /v1/ops/groups) be
// built and written at once as the server has cores; the others wait
// their turn (api.Turns.Serve: on the lean servers without their
// in-flight slot) for at most api.LargeAnswerPatience. A page is up to 16 MB (1,000 groups of 100 consumers),
// its groups gathered from every partition: a field test's 32 unread
// streams of such lists took the server to 5.6 GB, and 512 of operator
// pages of 3.3 MB held every partition busy for 28 s.
func (a *API) oneOfFew(h api.HandlerFunc) api.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) int {
		return a.lists.Serve(w, r, h, "too many group lists are being built or sent")
	}
}

// NewAPI returns the sequencer API over eng; hub receives the engine's
// notes (see Hub.Notify).
func NewAPI(eng *engine.Engine, hub *Hub) *API {
	a := &API{eng: eng, hub: hub, retention: time.Duration(DefaultRetentionNs), done: make(chan struct{}),
		lists: api.NewLargeAnswerTurns()}
	a.bench = newBench(a, DefaultBenchProcessors)
	return a
}

// SetRetention sets how long released messages published from now on are
// kept when no consumer has passed them; each Publish logs it, so replay
// purges what the live run purged.
func (a *API) SetRetention(d time.Duration) *API {
	if d > 0 {
		a.retention = d
	}
	return a
}

// SetBenchProcessors sets the size of the benchmark's processor pool
// (before the first POST /messages).
func (a *API) SetBenchProcessors(n int) *API {
	if n > 0 {
		a.bench.workers = n
	}
	return a
}

// Shutdown ends every long poll and stream at once and stops the
// benchmark's processors, so a graceful shutdown does not wait for them.
func (a *API) Shutdown() {
	a.stopOnce.Do(func() { close(a.done) })
	a.bench.wait()
}

// Register adds the routes to mux.
func (a *API) Register(mux *http.ServeMux, m *api.Metrics) {
	m.Handle(mux, "GET /v1/groups", a.oneOfFew(a.listGroups))
	m.Handle(mux, "GET /v1/groups/{group}", a.groupInfo)
	m.Handle(mux, "DELETE /v1/groups/{group}", a.deleteGroup)
	m.Handle(mux, "POST /v1/groups/{group}/messages", a.publish)
	m.Handle(mux, "POST /v1/groups/{group}/lease", a.lease)
	m.Handle(mux, "POST /v1/groups/{group}/complete", a.complete)
	m.Handle(mux, "POST /v1/groups/{group}/extend", a.extend)
	m.Handle(mux, "POST /v1/groups/{group}/release", a.release)
	m.Handle(mux, "GET /v1/groups/{group}/output", a.output)
	m.Handle(mux, "GET /v1/groups/{group}/output/stream", a.stream)
	m.Handle(mux, "POST /v1/groups/{group}/consumers/{consumer}/commit", a.commit)

	m.Handle(mux, "POST /messages", a.benchCreate)
	m.Handle(mux, "DELETE /messages", a.benchDelete)
	m.Handle(mux, "GET /list/sequenced/count", a.benchCount)
	m.Handle(mux, "GET /list/stats", a.benchStats)
	m.Handle(mux, "GET /list/perfs", a.benchPerfs)
	a.registerOps(mux, m)
}
