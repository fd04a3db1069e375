package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// fakeSequencer serves the peer's benchmark routes from memory: a POST
// /messages group is "sequenced" by a goroutine at perMs messages a
// millisecond, so the bench's polling, stats reading and checks can be
// tested without the engine. Its knobs make the faults the bench must
// catch: a group out of order, a count that goes past what was sent, a
// group that never completes.
type fakeSequencer struct {
	perMs      int  // messages sequenced per millisecond
	disorder   bool // report isOrdered false
	overcount  int  // add this to every complete count
	stall      bool // never sequence anything
	bareCount  bool // answer the count as a bare number, as the peer does
	microStats bool // stats in µs with unit suffixes, as a list of stages

	mu      sync.Mutex
	groups  map[string]*fakeSeqGroup
	posts   []seqCreate
	deletes []string
	last    string
	cpu     float64
}

type fakeSeqGroup struct {
	n    int
	done int
	stop chan struct{}
}

func newFakeSequencer(perMs int) *fakeSequencer {
	return &fakeSequencer{perMs: perMs, groups: map[string]*fakeSeqGroup{}}
}

func (f *fakeSequencer) group(r *http.Request) (*fakeSeqGroup, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.URL.Query().Get("name")
	if name == "" {
		name = f.last
	}
	return f.groups[name], name
}

func (f *fakeSequencer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health_check", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		f.cpu += 0.5
		fmt.Fprintf(w, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %g\n", f.cpu)
		f.mu.Unlock()
	})
	mux.HandleFunc("POST /messages", func(w http.ResponseWriter, r *http.Request) {
		var c seqCreate
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Name == "" || c.NumberOfMessages < 1 {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		g := &fakeSeqGroup{n: c.NumberOfMessages, stop: make(chan struct{})}
		f.mu.Lock()
		f.posts = append(f.posts, c)
		if old := f.groups[c.Name]; old != nil {
			close(old.stop)
		}
		f.groups[c.Name], f.last = g, c.Name
		f.mu.Unlock()
		if !f.stall {
			go f.sequence(g)
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"name": c.Name, "numberOfMessages": c.NumberOfMessages})
	})
	mux.HandleFunc("DELETE /messages", func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		f.mu.Lock()
		defer f.mu.Unlock()
		f.deletes = append(f.deletes, name)
		g := f.groups[name]
		if g == nil {
			http.Error(w, `{"error":"no such group"}`, http.StatusNotFound)
			return
		}
		close(g.stop)
		delete(f.groups, name)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /list/sequenced/count", func(w http.ResponseWriter, r *http.Request) {
		g, name := f.group(r)
		if g == nil {
			http.Error(w, `{"error":"no such group"}`, http.StatusNotFound)
			return
		}
		n := f.done(g)
		if f.bareCount {
			fmt.Fprint(w, n)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": name, "count": n})
	})
	mux.HandleFunc("GET /list/stats", func(w http.ResponseWriter, r *http.Request) {
		g, name := f.group(r)
		if g == nil {
			http.Error(w, `{"error":"no such group"}`, http.StatusNotFound)
			return
		}
		// Stage k's figures are k+1 ms times 1, 2, 3, ... so the test can
		// tell them apart and check the unit conversion.
		stages := []string{"createdToProcessing", "processingToProcessed", "processedToSequencing", "sequencingToSequenced", "createdToSequenced"}
		order := map[string]any{"isOrdered": !f.disorder}
		if f.disorder {
			order["brokeAt"] = 17
		}
		if f.microStats {
			var list []map[string]any
			for k, s := range stages {
				b := float64(k+1) * 1000
				list = append(list, map[string]any{"stage": s, "p50Us": b, "p90Us": 2 * b, "p95Us": 3 * b, "p99Us": 4 * b, "avgUs": 5 * b, "minUs": 0, "maxUs": 7 * b})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"name": name, "stages": list, "order": order})
			return
		}
		m := map[string]any{}
		for k, s := range stages {
			b := float64(k + 1)
			m[s] = map[string]any{"p50": b, "p90": 2 * b, "p95": 3 * b, "p99": 4 * b, "average": 5 * b, "min": 0, "max": 7 * b}
		}
		out := map[string]any{"name": name, "count": f.done(g), "unit": "ms", "stages": m}
		for k, v := range order {
			out[k] = v
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("GET /list/perfs", func(w http.ResponseWriter, r *http.Request) {
		g, name := f.group(r)
		if g == nil {
			http.Error(w, `{"error":"no such group"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": name,
			"perSecond":                  []map[string]any{{"second": 0, "processed": g.n, "sequenced": g.n}},
			"averageProcessingPerSecond": 1, "averageRate": float64(f.perMs) * 1000})
	})
	return mux
}

func (f *fakeSequencer) done(g *fakeSeqGroup) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g.done == g.n {
		return g.done + f.overcount
	}
	return g.done
}

func (f *fakeSequencer) sequence(g *fakeSeqGroup) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		f.mu.Lock()
		g.done = min(g.n, g.done+f.perMs)
		full := g.done == g.n
		f.mu.Unlock()
		if full {
			return
		}
	}
}

func (f *fakeSequencer) postsSeen() ([]seqCreate, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seqCreate(nil), f.posts...), append([]string(nil), f.deletes...)
}
