package commerce

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// Large list pages are built at most as many at once as there are cores;
// small ones are not held back by them.
func TestHeavyListsBounded(t *testing.T) {
	a := &API{lists: api.NewTurns(runtime.GOMAXPROCS(0), time.Hour)}
	var inside, most atomic.Int64
	release := make(chan struct{})
	h := a.heavy(func(w http.ResponseWriter, r *http.Request) int {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if r.URL.Query().Get("limit") != "5" {
			<-release
		}
		inside.Add(-1)
		return http.StatusOK
	})
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() { h(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/orders?limit=1000", nil)) })
	}
	for inside.Load() < int64(runtime.GOMAXPROCS(0)) {
		runtime.Gosched()
	}
	// A small page goes through while the large ones wait.
	if st := h(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/orders?limit=5", nil)); st != http.StatusOK {
		t.Fatalf("small page: %d", st)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); m > int64(runtime.GOMAXPROCS(0))+1 {
		t.Fatalf("%d pages built at once; at most %d large ones and the small one", m, runtime.GOMAXPROCS(0))
	}
}

// A large list that gets no turn within its patience is refused with a
// pause to come back after, and the turns are all there afterwards.
func TestHeavyListWaitEnds(t *testing.T) {
	a := &API{lists: api.NewTurns(1, 50*time.Millisecond)}
	release := make(chan struct{})
	h := a.heavy(func(w http.ResponseWriter, r *http.Request) int {
		if r.URL.Query().Get("hold") != "" {
			<-release
		}
		return http.StatusOK
	})
	held := make(chan int)
	go func() {
		held <- h(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/orders?limit=1000&hold=1", nil))
	}()
	var rec *httptest.ResponseRecorder
	for st := http.StatusOK; st == http.StatusOK; { // until the holder has its turn
		rec = httptest.NewRecorder()
		st = h(rec, httptest.NewRequest("GET", "/api/orders?limit=1000", nil))
	}
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a large list with no turn: %d, Retry-After %q; want 503 with a pause", rec.Code, rec.Header().Get("Retry-After"))
	}
	close(release)
	if st := <-held; st != http.StatusOK {
		t.Fatalf("the holder: %d", st)
	}
	if st := h(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/orders?limit=1000", nil)); st != http.StatusOK {
		t.Fatalf("after the holder: %d", st)
	}
}
