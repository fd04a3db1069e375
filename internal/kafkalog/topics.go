package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// snapshotTopicMaxMessageBytes leaves room above one chunk for the record's
// key, value header and batch framing.
const snapshotTopicMaxMessageBytes = 2 << 20

// EnsureTopics creates the cluster's log and snapshot topics when missing
// and returns the partition count, which the log topic decides once it
// exists. Several nodes may call it at once: a topic another node created
// in between is taken as it is.
func EnsureTopics(ctx context.Context, adm *kadm.Client, cfg Config) (partitions int, err error) {
	cfg = cfg.withDefaults()
	if cfg.Cluster == "" {
		return 0, errors.New("kafkalog: no cluster name configured")
	}
	logCfg := map[string]*string{
		"cleanup.policy": kadm.StringPtr("delete"),
		"retention.ms":   kadm.StringPtr(strconv.FormatInt(cfg.LogRetention.Milliseconds(), 10)),
	}
	snapCfg := map[string]*string{
		"cleanup.policy":    kadm.StringPtr("compact"),
		"max.message.bytes": kadm.StringPtr(strconv.Itoa(snapshotTopicMaxMessageBytes)),
	}
	if cfg.Replication >= 3 {
		// acks=all then means "on two replicas at least", so losing one
		// broker loses no acknowledged append.
		logCfg["min.insync.replicas"] = kadm.StringPtr("2")
		snapCfg["min.insync.replicas"] = kadm.StringPtr("2")
	}

	n, err := ensureTopic(ctx, adm, cfg, cfg.LogTopic(), cfg.Partitions, logCfg)
	if err != nil {
		return 0, err
	}
	if cfg.Partitions != 0 && cfg.Partitions != n {
		return 0, fmt.Errorf("kafkalog: topic %s has %d partitions but %d were asked for; the partition count of a cluster cannot change (keys would move)",
			cfg.LogTopic(), n, cfg.Partitions)
	}
	sn, err := ensureTopic(ctx, adm, cfg, cfg.SnapshotTopic(), n, snapCfg)
	if err != nil {
		return 0, err
	}
	if sn != n {
		return 0, fmt.Errorf("kafkalog: topic %s has %d partitions but the log topic %s has %d; they must match",
			cfg.SnapshotTopic(), sn, cfg.LogTopic(), n)
	}
	return n, nil
}

// ensureTopic returns the partition count of topic, creating it with want
// partitions if it does not exist (want 0: it must exist).
func ensureTopic(ctx context.Context, adm *kadm.Client, cfg Config, topic string, want int, configs map[string]*string) (int, error) {
	// Create first and look second: franz-go caches a metadata answer that
	// a topic is unknown for seconds, so looking before creating would
	// hide the topic just created.
	if want > 0 {
		resp, err := adm.CreateTopic(ctx, int32(want), int16(cfg.Replication), configs, topic)
		switch {
		case err == nil && resp.NumPartitions > 0:
			return int(resp.NumPartitions), nil
		case err != nil && !errors.Is(err, kerr.TopicAlreadyExists):
			return 0, fmt.Errorf("kafkalog: creating topic %s (%d partitions, replication %d): %w", topic, want, cfg.Replication, err)
		}
	}
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("kafkalog: describing topic %s: %w", topic, err)
		}
		d, ok := details[topic]
		switch {
		case ok && d.Err == nil && len(d.Partitions) > 0:
			return len(d.Partitions), nil
		case ok && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			return 0, fmt.Errorf("kafkalog: describing topic %s: %w", topic, d.Err)
		case want <= 0:
			return 0, fmt.Errorf("kafkalog: topic %s does not exist and no partition count was given to create it", topic)
		}
		// Created by another node an instant ago: it takes a moment to
		// show up in metadata.
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("kafkalog: waiting for topic %s: %w", topic, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
