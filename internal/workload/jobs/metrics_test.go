package jobs_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/workload/jobs"
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

// gatherFlat returns every gathered series as name{label="value",...}
// (a histogram as its _count and _sum).
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
			set := "{" + strings.Join(labels, ",") + "}"
			if h := m.GetHistogram(); h != nil {
				out[mf.GetName()+"_count"+set] = float64(h.GetSampleCount())
				out[mf.GetName()+"_sum"+set] = h.GetSampleSum()
				continue
			}
			out[mf.GetName()+set] = v
		}
	}
	return out
}

// A job's start delay is its lease's logged time less its submission's
// (or its not_before, when later), observed once per first lease under
// its queue; the slots of the streaming workers are busy and free.
func TestStartDelayAndWorkerSlots(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.api.Collector())
	early := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{}`)})
	later := c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte(`{}`),
		NotBefore: timestamppb.New(time.Now().Add(300 * time.Millisecond))})
	time.Sleep(100 * time.Millisecond) // the first waits for a worker
	w := c.worker(t, "w1", 4, false)
	w.next(t)
	w.next(t)
	want := 0.0
	for _, id := range []string{early, later} {
		j := c.job(t, id)
		from := j.CreatedAt.AsTime()
		if nb := j.GetNotBefore(); nb != nil && nb.AsTime().After(from) {
			from = nb.AsTime()
		}
		want += j.StartedAt.AsTime().Sub(from).Seconds()
	}
	got := gatherFlat(t, reg)
	if n := got[`surge_jobs_start_delay_seconds_count{queue="default"}`]; n != 2 {
		t.Fatalf("start delays observed: %v, want 2 (%v)", n, got)
	}
	if sum := got[`surge_jobs_start_delay_seconds_sum{queue="default"}`]; math.Abs(sum-want) > 1e-6 || sum < 0.1 {
		t.Fatalf("start delays add up to %vs, want %vs (at least the 0.1 s the first waited)", sum, want)
	}
	for series, v := range map[string]float64{`surge_jobs_worker_slots{state="busy"}`: 2, `surge_jobs_worker_slots{state="free"}`: 2} {
		if got[series] != v {
			t.Errorf("%s = %v, want %v", series, got[series], v)
		}
	}
}

// Past MaxQueueSeries queues, the rest are added up under _other: the
// label set stays bounded whatever queues clients create.
func TestQueueSeriesBounded(t *testing.T) {
	c := newAPI(t, 30*time.Second)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.api.Collector())
	for i := range jobs.MaxQueueSeries + 2 {
		if _, err := c.admin.CreateQueue(ctxT(t), connect.NewRequest(&jqpb.CreateQueueRequest{Name: fmt.Sprintf("q%03d", i)})); err != nil {
			t.Fatal(err)
		}
	}
	// The queues sort default, q000…q101: the last three go to _other.
	last := fmt.Sprintf("q%03d", jobs.MaxQueueSeries+1)
	for range 3 {
		c.submit(t, &jqpb.SubmitJobRequest{QueueName: last, Payload: []byte(`{}`)})
	}
	got := gatherFlat(t, reg)
	queues := map[string]bool{}
	for series := range got {
		if strings.HasPrefix(series, `surge_jobs{queue="`) {
			queues[strings.Split(series, `"`)[1]] = true
		}
	}
	if len(queues) != jobs.MaxQueueSeries+1 || !queues[jobs.OtherQueue] || queues[last] {
		t.Fatalf("%d queue labels (want %d with %s, without %s)", len(queues), jobs.MaxQueueSeries+1, jobs.OtherQueue, last)
	}
	if v := got[`surge_jobs{queue="_other",state="PENDING"}`]; v != 3 {
		t.Fatalf("_other holds %v pending jobs, want 3", v)
	}
}
