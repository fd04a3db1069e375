package kafkalog

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/surge-run/surge/internal/cmdlog"
)

// BenchmarkAppend measures group commit: 64 appenders, each append one
// 100-byte entry, against the real broker. Reports appends/s and how many
// appends one transaction carried.
//
//	go test -run '^$' -bench Append -benchtime 20000x ./internal/kafkalog/
func BenchmarkAppend(b *testing.B) {
	cfg := testCluster(b, 1)
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	l, err := Open(ctxT(b), cfg, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	const appenders = 64
	data := make([]byte, 100)
	var failed sync.Once
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Go(func() {
			done := make(chan struct{}, 1)
			for i := g; i < b.N; i += appenders {
				l.Append([]cmdlog.Entry{{Data: data}}, func(_, _ cmdlog.Position, err error) {
					if err != nil {
						failed.Do(func() { b.Error(err) })
					}
					done <- struct{}{}
				})
				<-done
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	var m dto.Metric
	if err := cfg.Metrics.TxnAppends.Write(&m); err == nil && m.GetHistogram().GetSampleCount() > 0 {
		b.ReportMetric(m.GetHistogram().GetSampleSum()/float64(m.GetHistogram().GetSampleCount()), "appends/txn")
	}
	if err := cfg.Metrics.ProduceSeconds.Write(&m); err == nil && m.GetHistogram().GetSampleCount() > 0 {
		b.ReportMetric(1e3*m.GetHistogram().GetSampleSum()/float64(m.GetHistogram().GetSampleCount()), "ms/append")
	}
}
