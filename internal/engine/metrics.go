package engine

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the engine's Prometheus instruments. Observed once per batch,
// never per command, so they stay off the hot path.
type Metrics struct {
	reg prometheus.Registerer
	// Batch sizes and apply times are counted per partition and exposed
	// by a collector once the engine starts (batchstats.go).
	Snapshots prometheus.Counter
	// SnapshotForkSeconds is how long a partition stalls to capture its
	// state for a snapshot; SnapshotEncodeSeconds is the encoding that
	// follows on the snapshot writer.
	SnapshotForkSeconds   prometheus.Histogram
	SnapshotEncodeSeconds prometheus.Histogram
	// Dropped counts inputs that could not be applied (a logged command
	// that does not decode); live and replay drop the same ones.
	Dropped prometheus.Counter
	// Shed counts client requests answered without being applied, by
	// reason (see shedReasons).
	Shed *prometheus.CounterVec
	shed [len(shedReasons)]prometheus.Counter
	// Cluster mode: which partitions this node serves (1) or not (0), and
	// requests sent to other nodes, by outcome.
	owned *prometheus.GaugeVec
	// Cluster mode: each time this node took a partition over, and how
	// long the takeover (snapshot and replay) kept it unserved here. The
	// gauge alone misses a partition that left and came back between
	// two scrapes.
	acquired       *prometheus.CounterVec
	acquireSeconds prometheus.Histogram
	forwarded      *prometheus.CounterVec
	forwardBatch   prometheus.Histogram
	forwardSeconds prometheus.Histogram
	timersFired    *prometheus.CounterVec
}

func partLabel(p int) string { return strconv.Itoa(p) }

// Reasons a request is shed, indexes into shedReasons.
const (
	shedQueueDelay = iota // refused at submission: the estimated wait is too long
	shedInboxFull         // refused at submission: the inbox is full
	shedExpired           // taken after waiting longer than MaxQueueDelay
	shedCancelled         // taken after its client had gone
)

var shedReasons = [...]string{"queue_delay", "inbox_full", "expired", "cancelled"}

// NewMetrics registers the engine metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		Snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "surge_engine_snapshots_total",
			Help: "Partition snapshots written.",
		}),
	}
	m.SnapshotForkSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_engine_snapshot_fork_seconds",
		Help:    "Time a partition stops (serving nothing) to capture its state for a snapshot.",
		Buckets: prometheus.ExponentialBuckets(1e-5, 2, 18),
	})
	m.SnapshotEncodeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_engine_snapshot_encode_seconds",
		Help:    "Time the snapshot writer spends encoding a captured partition state.",
		Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16),
	})
	m.Dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "surge_engine_dropped_inputs_total",
		Help: "Logged inputs that could not be applied (their command does not decode) and were dropped, identically live and in replay.",
	})
	m.Shed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surge_engine_shed_total",
		Help: "Client requests answered without being applied: refused at submission (queue_delay: the partition's estimated wait is above half of --max-queue-delay; inbox_full), or taken from the queue too late (expired: waited longer than --max-queue-delay; cancelled: the client had gone).",
	}, []string{"reason"})
	for i, r := range shedReasons {
		m.shed[i] = m.Shed.WithLabelValues(r)
	}
	m.owned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "surge_partition_owned",
		Help: "Cluster mode: 1 for each partition this node serves, 0 for one it served before.",
	}, []string{"partition"})
	m.acquired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surge_partition_acquired_total",
		Help: "Cluster mode: times this node took the partition over (restored its snapshot, replayed its log and began serving it): at start, and at each failover or rebalance that moved it here.",
	}, []string{"partition"})
	m.acquireSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_partition_acquire_seconds",
		Help:    "Cluster mode: time a takeover took on this node once the partition's log was open (which fences the previous owner): restoring its snapshot and replaying the log until it served it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surge_cluster_forwarded_total",
		Help: "Cluster mode: requests for partitions served by other nodes, sent to their owner (sent), and retries while a partition had no reachable owner (retry).",
	}, []string{"result"})
	m.forwardBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_cluster_forward_batch_requests",
		Help:    "Cluster mode: requests carried by one call to another node.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	})
	m.forwardSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_cluster_forward_seconds",
		Help:    "Cluster mode: time from forwarding a request to its owner's answer.",
		Buckets: prometheus.ExponentialBuckets(1e-4, 2, 16),
	})
	m.timersFired = newTimersFired()
	reg.MustRegister(m.owned, m.acquired, m.acquireSeconds, m.forwarded, m.forwardBatch, m.forwardSeconds, m.timersFired)
	reg.MustRegister(m.Snapshots, m.SnapshotForkSeconds, m.SnapshotEncodeSeconds, m.Dropped, m.Shed)
	return m
}

// delayCollector exposes the partitions' inbox-wait counts as one
// histogram, summed at scrape time: counting per partition keeps the
// per-request cost to two uncontended atomic adds.
type delayCollector struct {
	desc  *prometheus.Desc
	parts []*partition
}

func (c *delayCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *delayCollector) Collect(ch chan<- prometheus.Metric) {
	var counts [delayBuckets + 1]uint64
	var sumNs int64
	for _, p := range c.parts {
		for i := range counts {
			counts[i] += p.delays.counts[i].Load()
		}
		sumNs += p.delays.sumNs.Load()
	}
	buckets := make(map[float64]uint64, delayBuckets)
	var cum uint64
	for i := range delayBuckets {
		cum += counts[i]
		buckets[delayBound(i)] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.desc, cum+counts[delayBuckets], float64(sumNs)/1e9, buckets)
}

// watch adds gauges that read the engine's queues at scrape time.
func (m *Metrics) watch(e *Engine) {
	m.watchHealth(e)
	m.reg.MustRegister(newBatchCollector(e.parts))
	m.reg.MustRegister(&delayCollector{
		desc: prometheus.NewDesc("surge_engine_queue_delay_seconds",
			"Time client requests waited in a partition's inbox before the processor took them (all partitions).", nil, nil),
		parts: e.parts,
	})
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surge_engine_log_unsnapshotted_bytes",
		Help: "Log written or replayed by the partitions since their last snapshots: what a restart after kill -9 would replay now (the byte trigger snapshots at --snapshot-bytes).",
	}, func() float64 { return float64(e.unsnapped.Load()) }))
	for _, p := range e.parts {
		p := p
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "surge_engine_inbox_depth",
			Help:        "Requests waiting in a partition's inbox.",
			ConstLabels: prometheus.Labels{"partition": strconv.Itoa(p.id)},
		}, func() float64 { return float64(len(p.inbox)) }))
	}
}
