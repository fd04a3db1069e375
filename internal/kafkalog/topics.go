package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/surge-run/surge/internal/cmdlog"
)

// snapshotTopicMaxMessageBytes leaves room above one chunk for the record's
// key, value header and batch framing.
const snapshotTopicMaxMessageBytes = 2 << 20

// maxMessageBytesKey is the topic config bounding one record batch; a
// topic without it takes the broker's message.max.bytes (1 MB by
// default), which DescribeConfigs reports as the topic's value.
const maxMessageBytesKey = "max.message.bytes"

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
		"cleanup.policy":   kadm.StringPtr("delete"),
		"retention.ms":     kadm.StringPtr(strconv.FormatInt(cfg.LogRetention.Milliseconds(), 10)),
		maxMessageBytesKey: kadm.StringPtr(strconv.Itoa(MaxMessageBytes)),
	}
	snapCfg := map[string]*string{
		"cleanup.policy":   kadm.StringPtr("compact"),
		maxMessageBytesKey: kadm.StringPtr(strconv.Itoa(snapshotTopicMaxMessageBytes)),
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
	// Whoever created them, and however long ago: a topic that cannot
	// take the largest record would fail appends of legal commands.
	if err := checkMaxMessageBytes(ctx, adm, cfg.LogTopic(), MaxMessageBytes); err != nil {
		return 0, err
	}
	if err := checkMaxMessageBytes(ctx, adm, cfg.SnapshotTopic(), snapshotMessageBytes); err != nil {
		return 0, err
	}
	return n, nil
}

// checkMaxMessageBytes refuses a topic whose effective max.message.bytes
// (its own, else the broker's message.max.bytes) is below need.
func checkMaxMessageBytes(ctx context.Context, adm *kadm.Client, topic string, need int) error {
	for {
		v, err := maxMessageBytes(ctx, adm, topic)
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			// Created an instant ago (by this node or another): its
			// config takes a moment to reach every broker.
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafkalog: reading the config of topic %s: %w", topic, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case err != nil:
			return fmt.Errorf("kafkalog: reading the config of topic %s: %w", topic, err)
		case v < need:
			return fmt.Errorf("kafkalog: topic %s takes records of at most %d bytes (max.message.bytes), but Surge writes records of up to %d bytes "+
				"(one command's log entry of up to %d bytes, plus framing); raise it: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config max.message.bytes=%d",
				topic, v, need, cmdlog.MaxEntryBytes, topic, need)
		}
		return nil
	}
}

func maxMessageBytes(ctx context.Context, adm *kadm.Client, topic string) (int, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, err
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return 0, err
	}
	if rc.Err != nil {
		return 0, rc.Err
	}
	for _, c := range rc.Configs {
		if c.Key != maxMessageBytesKey {
			continue
		}
		v, err := strconv.Atoi(c.MaybeValue())
		if err != nil {
			return 0, fmt.Errorf("%s is %q: %w", maxMessageBytesKey, c.MaybeValue(), err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("the broker did not report %s", maxMessageBytesKey)
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
