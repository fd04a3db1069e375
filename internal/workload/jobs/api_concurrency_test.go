package jobs_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
)

// A worker never holds more jobs than its concurrency, whatever leases
// for it race: its stream's own Lease, submits that lease it a job
// (SubmitLease) and reports that lease it the next (Next), with many
// submitters at once and reports at random moments. The worker counts a
// job from its push to the start of its report; a report's successor can
// only be pushed after the report was sent, so a count over the
// concurrency is a push the server should not have made.
func TestAPIWorkerNeverHoldsMoreThanItsConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("320 jobs through one worker")
	}
	const (
		concurrency = 4
		submitters  = 8
		each        = 40
		total       = submitters * each
	)
	c := newAPI(t, time.Hour)
	w := c.worker(t, "w1", concurrency, false)
	ctx := ctxT(t)
	submitErrs := make(chan error, submitters)
	for range submitters {
		go func() {
			var err error
			for i := 0; i < each && err == nil; i++ {
				_, err = c.jobs.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Priority: int32(i % 10)}))
			}
			submitErrs <- err
		}()
	}
	starting := make(chan struct{}) // unbuffered: a report starts after the count drops
	reportErrs := make(chan error, total)
	held, maxHeld, reported := 0, 0, 0
	deadline := time.After(60 * time.Second)
	for reported < total {
		select {
		case a := <-w.got:
			held++
			maxHeld = max(maxHeld, held)
			if held > concurrency {
				t.Errorf("job %s pushed while the worker held %d unreported jobs; its concurrency is %d", a.JobId, held-1, concurrency)
			}
			go func() {
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				starting <- struct{}{}
				_, err := c.work.ReportResult(ctx, connect.NewRequest(&jqpb.ReportResultRequest{WorkerId: w.id, JobId: a.JobId, Success: true}))
				reportErrs <- err
			}()
		case <-starting:
			held--
			reported++
		case err := <-w.ended:
			t.Fatalf("stream ended: %v", err)
		case <-deadline:
			t.Fatalf("%d of %d jobs reported within 60 s", reported, total)
		}
	}
	for range submitters {
		if err := <-submitErrs; err != nil {
			t.Fatal(err)
		}
	}
	for range total {
		if err := <-reportErrs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("at most %d jobs held at once", maxHeld)
}
