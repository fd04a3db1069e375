package commerce

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Large list pages are built at most as many at once as there are cores;
// small ones are not held back by them.
func TestHeavyListsBounded(t *testing.T) {
	a := &API{lists: make(chan struct{}, runtime.GOMAXPROCS(0))}
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
