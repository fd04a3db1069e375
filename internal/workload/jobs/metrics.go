package jobs

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricsScrapeTimeout bounds the queries one scrape makes of the
// partitions; a busy engine leaves these series out of that scrape.
const metricsScrapeTimeout = 2 * time.Second

// MaxQueueSeries bounds the queues that get series of their own (in
// surge_jobs, surge_jobs_processed_total and
// surge_jobs_start_delay_seconds): the first this many a node meets
// (at its first scrape, by name) keep theirs until it restarts, and the
// others are added up under queue="_other", so a client creating queues
// cannot grow Prometheus without bound.
const MaxQueueSeries = 100

// OtherQueue labels the queues beyond MaxQueueSeries.
const OtherQueue = "_other"

// startDelayBuckets cover a job pushed one group commit after its submit
// to one that waited an hour for a worker.
var startDelayBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// jobsMetrics holds what the API observes (the start delays) and the
// queues that have their own series.
type jobsMetrics struct {
	mu     sync.RWMutex
	queues map[string]prometheus.Observer // at most MaxQueueSeries
	other  prometheus.Observer
	delay  *prometheus.HistogramVec
}

func newJobsMetrics() *jobsMetrics {
	m := &jobsMetrics{queues: map[string]prometheus.Observer{}, delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "surge_jobs_start_delay_seconds",
		Help: "Time from a job's submission (or its not_before, if later) to its first lease to a worker, by queue (the first " +
			strconv.Itoa(MaxQueueSeries) + " queues a node meets; the rest under " + OtherQueue + "); logged times, observed once the lease is durable.",
		Buckets: startDelayBuckets,
	}, []string{"queue"})}
	m.other = m.delay.WithLabelValues(OtherQueue)
	return m
}

// observer returns the queue's start-delay series: its own while it has
// one or there is room, else _other's. A queue seen before costs a map
// read under a read lock, and nothing is allocated. A queue named
// _other shares that series.
func (m *jobsMetrics) observer(queue string) prometheus.Observer {
	if queue == OtherQueue {
		return m.other
	}
	m.mu.RLock()
	o, ok := m.queues[queue]
	full := len(m.queues) >= MaxQueueSeries
	m.mu.RUnlock()
	if ok {
		return o
	}
	if full {
		return m.other
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.queues[queue]; ok {
		return o
	}
	if len(m.queues) >= MaxQueueSeries {
		return m.other
	}
	o = m.delay.WithLabelValues(queue)
	m.queues[queue] = o
	return o
}

// label is the queue's label in the per-queue series.
func (m *jobsMetrics) label(queue string) string {
	if m.observer(queue) == m.other {
		return OtherQueue
	}
	return queue
}

// leased observes the start delay of the jobs a Lease of queue took, on
// the stream's goroutine once the lease is durable. Only first attempts
// count: a retry's wait includes its earlier runs and backoff.
func (m *jobsMetrics) leased(queue string, jobs []*Job) {
	o := m.observer(queue)
	for _, j := range jobs {
		if j.RetryCount == 0 {
			o.Observe(float64(max(j.StartedAt-max(j.CreatedAt, j.NotBefore), 0)) / 1e9)
		}
	}
}

// Collector exports every queue's jobs by state, the registered workers
// and their slots at each scrape, and the start delays (register it on
// the server's registry).
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
	slotsDesc = prometheus.NewDesc("surge_jobs_worker_slots",
		"Job slots of the workers streaming from this node: busy (jobs pushed and not yet reported) and free (what their concurrency leaves; 0 for a draining worker).",
		[]string{"state"}, nil)
)

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsProcessedDesc
	ch <- workersDesc
	ch <- slotsDesc
	c.a.metrics.delay.Describe(ch)
}

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	active, known := c.a.hub.counts()
	gauge(workersDesc, active, "active")
	gauge(workersDesc, known, "known")
	busy, free := c.a.hub.slots()
	gauge(slotsDesc, busy, "busy")
	gauge(slotsDesc, free, "free")
	c.a.metrics.delay.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	qs, err := c.a.queues(ctx)
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	c.collectQueues(ch, qs)
}

// collectQueues exports qs (sorted by name), those beyond MaxQueueSeries
// added up under _other.
func (c jobsCollector) collectQueues(ch chan<- prometheus.Metric, qs []*Queue) {
	var other [numStatuses]int64
	var otherProcessed int64
	hasOther := false
	for _, q := range qs {
		if c.a.metrics.label(q.Name) == OtherQueue {
			hasOther = true
			for s := Pending; s < numStatuses; s++ {
				other[s] += q.counts[s]
			}
			otherProcessed += q.Processed
			continue
		}
		for s := Pending; s < numStatuses; s++ {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(q.counts[s]), q.Name, s.String())
		}
		ch <- prometheus.MustNewConstMetric(jobsProcessedDesc, prometheus.CounterValue, float64(q.Processed), q.Name)
	}
	if !hasOther {
		return
	}
	for s := Pending; s < numStatuses; s++ {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(other[s]), OtherQueue, s.String())
	}
	ch <- prometheus.MustNewConstMetric(jobsProcessedDesc, prometheus.CounterValue, float64(otherProcessed), OtherQueue)
}

// slots adds up the slots of the workers with an open stream.
func (h *Hub) slots() (busy, free int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.workers {
		if w.stream == nil {
			continue
		}
		busy += len(w.inflight)
		free += max(w.free(), 0)
	}
	return busy, free
}
