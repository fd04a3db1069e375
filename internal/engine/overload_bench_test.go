package engine_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
)

// BenchmarkOverload offers one partition ten times what it can serve and
// reports what the accepted commands waited, with admission by queue delay
// on (the default) and off (only a full inbox refuses, as before it
// existed), in one invocation:
//
//	go test -run XXX -bench Overload -benchtime 1x ./internal/engine/
//
// Over HTTP on a small machine the generator cannot offer ten times a
// partition's capacity (it needs as much CPU per request as the server),
// so the partition is made slow instead: its commands sleep 1 ms (the
// `slow` command), which caps it near 1,000 commands/s while leaving the
// CPU to the generator. Batches are kept at 16 commands so that a batch's
// own apply time (16 ms) stays small beside the queue, as it is for real
// commands of microseconds. Everything else is real: the WAL with fsync,
// the inbox, the processor. The client timeout is 10 s.
func BenchmarkOverload(b *testing.B) {
	for _, mode := range []struct {
		name  string
		delay time.Duration
	}{{"admission=on", 0}, {"admission=off", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			for range b.N {
				runOverload(b, mode.delay)
			}
		})
	}
}

const overloadTimeout = 10 * time.Second

func runOverload(b *testing.B, delay time.Duration) {
	e := openEngineWith(b, b.TempDir(), func(o *engine.Options) {
		o.Partitions, o.MaxBatch, o.MaxQueueDelay = 1, 16, delay
	})
	defer e.Close()
	var id atomic.Uint64

	// Capacity: a closed loop of 64 callers for one second.
	var served atomic.Int64
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if _, err := e.Do(context.Background(), 0, 7, &slow{ID: id.Add(1)}); err == nil {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	capacity := float64(served.Load())
	// Let the queue the closed loop left drain before offering more.
	for {
		if _, err := e.Do(context.Background(), 0, 7, &slow{ID: id.Add(1)}); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Overload: an open loop at ten times that for three seconds; each
	// request is sent when due whether or not earlier ones were answered,
	// and its latency counts from then.
	rate := 10 * capacity
	const seconds = 3
	total := int(rate * seconds)
	var mu sync.Mutex
	var accepted []time.Duration
	var refused, timedOut, other int
	var refusedSlowest time.Duration
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), overloadTimeout)
			defer cancel()
			_, err := e.Do(ctx, 0, 7, &slow{ID: id.Add(1)})
			took := time.Since(due)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted = append(accepted, took)
			case errors.Is(err, engine.ErrOverloaded):
				refused++
				refusedSlowest = max(refusedSlowest, took)
			case errors.Is(err, context.DeadlineExceeded):
				timedOut++
			default:
				other++
			}
		})
	}
	offered := float64(total) / time.Since(start).Seconds()
	wg.Wait()
	if other > 0 {
		b.Fatalf("%d requests failed other than by overload or timeout", other)
	}
	slices.Sort(accepted)
	pct := func(p float64) time.Duration {
		if len(accepted) == 0 {
			return 0
		}
		return accepted[min(len(accepted)-1, int(p*float64(len(accepted))))]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(capacity, "capacity/s")
	b.ReportMetric(offered, "offered/s")
	b.ReportMetric(100*float64(refused)/float64(total), "refused-%")
	b.ReportMetric(float64(timedOut), "timeouts")
	b.ReportMetric(ms(pct(0.50)), "accepted-p50-ms")
	b.ReportMetric(ms(pct(0.99)), "accepted-p99-ms")
	b.ReportMetric(ms(pct(1)), "accepted-max-ms")
	b.ReportMetric(ms(refusedSlowest), "refused-max-ms")
	b.Logf("capacity %.0f/s, offered %.0f/s (%d requests): accepted %d, refused %d, timed out %d",
		capacity, offered, total, len(accepted), refused, timedOut)
}
