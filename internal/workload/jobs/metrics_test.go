package jobs_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/jqpb"
)

// /metrics shows each queue's jobs by state and the workers, which the
// jobs dashboard (deploy/grafana) draws.
func TestCollectorExportsJobsByQueueAndState(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.api.Collector())
	w := c.worker(t, "w1", 4, false)
	done := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{}`)})
	if a := w.next(t); a.JobId != done {
		t.Fatalf("assignment %v, want job %s", a, done)
	}
	if err := c.report(t, "w1", done, true); err != nil {
		t.Fatal(err)
	}
	held := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{}`)})
	if a := w.next(t); a.JobId != held {
		t.Fatalf("assignment %v, want job %s", a, held)
	}
	got := gatherFlat(t, reg)
	for series, v := range map[string]float64{
		`surge_jobs{queue="default",state="ASSIGNED"}`:      1,
		`surge_jobs{queue="default",state="DONE"}`:          1,
		`surge_jobs{queue="default",state="PENDING"}`:       0,
		`surge_jobs{queue="default",state="RUNNING"}`:       0,
		`surge_jobs{queue="default",state="FAILED"}`:        0,
		`surge_jobs{queue="default",state="DEAD_LETTERED"}`: 0,
		`surge_jobs_processed_total{queue="default"}`:       1,
		`surge_jobs_workers{state="active"}`:                1,
		`surge_jobs_workers{state="known"}`:                 1,
	} {
		if g, ok := got[series]; !ok || g != v {
			t.Errorf("%s = %v (exported %v), want %v", series, g, ok, v)
		}
	}
}

// gatherFlat returns every gathered series as name{label="value",...}.
func gatherFlat(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue()
			if c := m.GetCounter(); c != nil {
				v = c.GetValue()
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}
