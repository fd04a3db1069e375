// Package kafkalog keeps a Surge partition's command log and snapshots on
// Apache Kafka (cluster mode). Each Surge partition is one partition of the
// log topic, written by a transactional producer whose transactional.id
// names the Surge partition: opening the log re-initialises that id, which
// makes Kafka fence every earlier owner. Snapshots go to a compacted topic
// with the same partitioning.
package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config says where the cluster's topics live and how to write them.
type Config struct {
	Brokers []string
	// Cluster names the Surge cluster; topics and transactional ids are
	// derived from it, so two clusters can share one Kafka.
	Cluster string
	// NodeID is written into every record's headers, to tell in the log
	// which node wrote what.
	NodeID string
	// Partitions is the Surge partition count. 0 means "whatever the log
	// topic has"; it is required only to create the topics.
	Partitions int
	// Replication is the replication factor of created topics (default 1;
	// use 3 in production).
	Replication int
	// LogRetention is how long log records are kept (default 7 days).
	// Snapshots must be taken more often than that.
	LogRetention time.Duration
	// TxnTimeout bounds one group-commit transaction: Kafka aborts a
	// transaction left open longer, and a produce that cannot complete
	// within it fails the append (default 10 s).
	TxnTimeout time.Duration
	// QueueLen bounds the appends waiting for the writer; Append blocks
	// beyond it (default 256).
	QueueLen int
	// MinCycle is how long after one transaction starts the next may
	// wait: appends arriving meanwhile wait and share the next one. Each
	// transaction costs the broker a few milliseconds of CPU whatever it
	// holds, so under load fewer, larger ones are cheaper; idle, an append
	// still goes at once, and the next transaction starts sooner once as
	// many entries wait as the largest recent ones carried
	// (internal/groupcommit). Default DefaultMinCycle; negative: none.
	MinCycle time.Duration
	// SnapshotTimeout bounds one snapshot write or read (default 2 min).
	SnapshotTimeout time.Duration
	// Security is TLS and SASL for every Kafka client made from this
	// Config (NewClient); the zero value is clear text, no SASL.
	Security Security
	Metrics  *Metrics
	Logger   *slog.Logger
}

// Defaults for the zero values of Config.
const (
	DefaultReplication     = 1
	DefaultLogRetention    = 7 * 24 * time.Hour
	DefaultTxnTimeout      = 10 * time.Second
	DefaultQueueLen        = 256
	DefaultMinCycle        = 20 * time.Millisecond
	DefaultSnapshotTimeout = 2 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.Replication == 0 {
		c.Replication = DefaultReplication
	}
	if c.LogRetention == 0 {
		c.LogRetention = DefaultLogRetention
	}
	if c.TxnTimeout == 0 {
		c.TxnTimeout = DefaultTxnTimeout
	}
	if c.QueueLen == 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.MinCycle == 0 {
		c.MinCycle = DefaultMinCycle
	}
	if c.SnapshotTimeout == 0 {
		c.SnapshotTimeout = DefaultSnapshotTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) check() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafkalog: no Kafka brokers configured")
	}
	if c.Cluster == "" {
		return errors.New("kafkalog: no cluster name configured")
	}
	if len(c.NodeID) > MaxNodeIDBytes {
		return fmt.Errorf("kafkalog: node id of %d bytes; the limit is %d", len(c.NodeID), MaxNodeIDBytes)
	}
	if err := c.Security.Check(); err != nil {
		return fmt.Errorf("kafkalog: %w", err)
	}
	return nil
}

// NewClient makes a franz-go client for the brokers with c's Security and
// opts: every Kafka client a node makes comes from here, so none of them
// skips TLS or SASL.
func (c Config) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	sec, err := c.Security.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("kafkalog: %w", err)
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, sec...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: %w", err)
	}
	return cl, nil
}

// LogTopic is the topic holding the cluster's command log.
func (c Config) LogTopic() string { return "surge." + c.Cluster + ".log" }

// SnapshotTopic is the compacted topic holding the cluster's snapshots.
func (c Config) SnapshotTopic() string { return "surge." + c.Cluster + ".snapshots" }

// TransactionalID is the id of the one producer allowed to write Surge
// partition p: whoever initialises it last owns the partition.
func (c Config) TransactionalID(p int) string {
	return fmt.Sprintf("surge.%s.p%d", c.Cluster, p)
}

// Metrics are the Kafka log's Prometheus instruments; a nil *Metrics
// records nothing.
type Metrics struct {
	// ProduceSeconds is how long an append waits from Append to done: the
	// group-commit cycle it joins plus the wait for the one before.
	ProduceSeconds prometheus.Histogram
	// TxnAppends is how many appends one transaction carries.
	TxnAppends prometheus.Histogram
}

// NewMetrics registers the Kafka log metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ProduceSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surge_kafka_produce_seconds",
			Help:    "Time from a log append to Kafka's commit of the transaction holding it.",
			Buckets: prometheus.ExponentialBuckets(250e-6, 2, 16),
		}),
		TxnAppends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "surge_kafka_txn_appends",
			Help:    "Appends (engine batches) committed per Kafka transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.ProduceSeconds, m.TxnAppends)
	}
	return m
}

func (m *Metrics) observeCycle(appends int) {
	if m != nil {
		m.TxnAppends.Observe(float64(appends))
	}
}

func (m *Metrics) observeWait(d time.Duration) {
	if m != nil {
		m.ProduceSeconds.Observe(d.Seconds())
	}
}

// KgoLogger passes franz-go's warnings and errors to l, each message
// prefixed; its info and debug lines (one per transaction) would drown
// everything else.
func KgoLogger(l *slog.Logger, prefix string) kgo.Logger { return kgoLogger{l, prefix} }

type kgoLogger struct {
	l      *slog.Logger
	prefix string
}

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	k.l.Log(context.Background(), lv, k.prefix+msg, keyvals...)
}
