package jobs_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/jqpb"
)

type queuesOps struct {
	Queues []struct {
		Name                                           string
		Paused                                         bool
		Pending, Assigned, Running, Done, DeadLettered int64
		StartLatency                                   struct {
			Samples             int
			P50Ms, P95Ms, MaxMs *float64
		}
	}
}

// opsServer serves a jobs API's operator reads until the test ends.
func opsServer(t *testing.T) (*clients, *httptest.Server) {
	c := newAPI(t, 30*time.Second)
	mux := http.NewServeMux()
	c.api.RegisterOps(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return c, srv
}

// Every queue with its counts, and a submit→start latency over the jobs
// that have started only.
func TestOperatorQueues(t *testing.T) {
	c, srv := opsServer(t)

	if _, err := c.admin.CreateQueue(ctxT(t), connect.NewRequest(&jqpb.CreateQueueRequest{Name: "idle"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.PauseQueue(ctxT(t), connect.NewRequest(&jqpb.PauseQueueRequest{Name: "idle"})); err != nil {
		t.Fatal(err)
	}
	c.submit(t, &jqpb.SubmitJobRequest{QueueName: "idle"})
	w := c.worker(t, "w1", 2, false, "default")
	for range 2 {
		c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"})
		a := w.next(t)
		if _, err := c.work.AckJob(ctxT(t), connect.NewRequest(&jqpb.AckJobRequest{WorkerId: "w1", JobId: a.JobId})); err != nil {
			t.Fatal(err)
		}
	}
	c.submit(t, &jqpb.SubmitJobRequest{QueueName: "default"}) // over the worker's concurrency: stays pending

	resp, err := http.Get(srv.URL + "/v1/ops/jobs/queues")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got queuesOps
	if resp.StatusCode != 200 || json.Unmarshal(b, &got) != nil || len(got.Queues) != 2 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	def, idle := got.Queues[0], got.Queues[1]
	if def.Name != "default" || def.Running != 2 || def.Pending != 1 || def.StartLatency.Samples != 2 ||
		def.StartLatency.P50Ms == nil || *def.StartLatency.P50Ms < 0 || *def.StartLatency.MaxMs < *def.StartLatency.P50Ms {
		t.Errorf("default: %s", b)
	}
	if idle.Name != "idle" || !idle.Paused || idle.Pending != 1 || idle.StartLatency.Samples != 0 || idle.StartLatency.P50Ms != nil {
		t.Errorf("idle: %s", b)
	}
}

// The operator queue list takes turns: with every turn held it waits its
// patience and is refused with a pause, and goes through once one is
// free.
func TestOperatorQueuesTakeTurns(t *testing.T) {
	c, srv := opsServer(t)
	give := c.api.HoldOpsTurns(1, 20*time.Millisecond)
	apitest.WantBusy(t, srv.URL+"/v1/ops/jobs/queues")
	give()
	resp, err := http.Get(srv.URL + "/v1/ops/jobs/queues")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with a turn free: %d", resp.StatusCode)
	}
}
