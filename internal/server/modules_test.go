package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// A long-lived call's handler gets a writer that holds its flushes, which
// the jobs module hands its worker streams as their BatchFlusher; a short
// call gets the server's own writer.
func TestLongLivedCallsCanHoldFlushes(t *testing.T) {
	var long, short bool
	h := unlimitedStream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := w.(jobs.BatchFlusher)
		if r.URL.Path == "/stream" {
			long = ok
		} else {
			short = ok
		}
	}), "/stream")
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/stream", nil))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/other", nil))
	if !long || short {
		t.Fatalf("writer can hold flushes: long-lived call %v, other call %v; want true, false", long, short)
	}
}

// Settings no module declares, or of the wrong type, are refused before
// anything is opened, naming the setting.
func TestRunRefusesUnknownSettings(t *testing.T) {
	for _, c := range []struct {
		s    module.Settings
		want string
	}{
		{module.Settings{"saga-deadlin": 1}, `setting "saga-deadlin": no module has such a flag`},
		{module.Settings{"saga-deadline": 60}, `setting "saga-deadline": int 60 is not a duration`},
		{module.Settings{"max-events": -1}, "--max-events -1: must be positive (or 0 for the default)"},
	} {
		cfg := dataDirConfig(t.TempDir(), 1, nil)
		cfg.Settings = c.s
		if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.s, err, c.want)
		}
	}
}
