package jobs

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsScrapeTimeout bounds the queries one scrape makes of the
// partitions; a busy engine leaves these series out of that scrape.
const metricsScrapeTimeout = 2 * time.Second

// Collector exports every queue's jobs by state and the registered
// workers at each scrape (register it on the server's registry).
func (a *API) Collector() prometheus.Collector { return jobsCollector{a} }

type jobsCollector struct{ a *API }

var (
	jobsDesc = prometheus.NewDesc("surge_jobs",
		"Jobs held in each queue by state (PENDING, ASSIGNED, RUNNING, DONE, FAILED, DEAD_LETTERED); finished ones until their retention ends.",
		[]string{"queue", "state"}, nil)
	jobsProcessedDesc = prometheus.NewDesc("surge_jobs_processed_total",
		"Jobs of each queue whose worker reported an outcome.", []string{"queue"}, nil)
	workersDesc = prometheus.NewDesc("surge_jobs_workers",
		"Job workers under --max-workers: active (streaming or heartbeating) and known (active plus those offline within --worker-grace).",
		[]string{"state"}, nil)
)

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsProcessedDesc
	ch <- workersDesc
}

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	active, known := c.a.hub.counts()
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(active), "active")
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(known), "known")
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	qs, err := c.a.queues(ctx)
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	for _, q := range qs {
		for s := Pending; s < numStatuses; s++ {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(q.counts[s]), q.Name, s.String())
		}
		ch <- prometheus.MustNewConstMetric(jobsProcessedDesc, prometheus.CounterValue, float64(q.Processed), q.Name)
	}
}
