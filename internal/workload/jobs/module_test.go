package jobs

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

type holdingWriter struct {
	http.ResponseWriter
	held bool
}

func (w *holdingWriter) Hold()    { w.held = true }
func (w *holdingWriter) Release() { w.held = false }

// The worker stream's sends are batched when the server gives the call a
// writer that can hold its flushes: the module hands that writer to the
// handler as its BatchFlusher, and no other.
func TestModuleHandsTheStreamItsBatchFlusher(t *testing.T) {
	var got BatchFlusher
	h := batchFlushing(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, _ = r.Context().Value(flusherKey{}).(BatchFlusher)
	}))
	w := &holdingWriter{ResponseWriter: httptest.NewRecorder()}
	h.ServeHTTP(w, httptest.NewRequest("POST", StreamPath, nil))
	if got != BatchFlusher(w) {
		t.Fatalf("the stream's handler got flusher %v, want the server's writer", got)
	}
	got = nil
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", StreamPath, nil))
	if got != nil {
		t.Fatalf("a writer that cannot hold its flushes became flusher %v", got)
	}
}
