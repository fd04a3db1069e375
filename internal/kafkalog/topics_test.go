package kafkalog

import (
	"strings"
	"sync"
	"testing"
)

func TestEnsureTopicsCreatesConcurrentlyAndIdempotently(t *testing.T) {
	cfg := testCluster(t, 1) // only for the brokers; a fresh name below
	cfg.Cluster += "-x"
	cfg.Partitions = 3
	adm := testAdmin(t, cfg)

	// Three nodes starting at once race to create the same topics.
	var wg sync.WaitGroup
	ns := make([]int, 3)
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() { ns[i], errs[i] = EnsureTopics(ctxT(t), adm, cfg) })
	}
	wg.Wait()
	for i := range 3 {
		if errs[i] != nil || ns[i] != 3 {
			t.Fatalf("node %d: %d partitions, %v", i, ns[i], errs[i])
		}
	}

	details, err := adm.ListTopics(ctxT(t), cfg.LogTopic(), cfg.SnapshotTopic())
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{cfg.LogTopic(), cfg.SnapshotTopic()} {
		if n := len(details[topic].Partitions); n != 3 {
			t.Errorf("%s: %d partitions, want 3", topic, n)
		}
	}
	rc, err := adm.DescribeTopicConfigs(ctxT(t), cfg.LogTopic(), cfg.SnapshotTopic())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{cfg.LogTopic(): "delete", cfg.SnapshotTopic(): "compact"}
	for _, c := range rc {
		for _, kv := range c.Configs {
			if kv.Key == "cleanup.policy" && (kv.Value == nil || *kv.Value != want[c.Name]) {
				t.Errorf("%s: cleanup.policy %v, want %s", c.Name, kv.MaybeValue(), want[c.Name])
			}
		}
	}

	// A node that does not know the count takes the topic's.
	cfg0 := cfg
	cfg0.Partitions = 0
	if n, err := EnsureTopics(ctxT(t), adm, cfg0); err != nil || n != 3 {
		t.Fatalf("partitions 0: %d, %v", n, err)
	}
	cfg5 := cfg
	cfg5.Partitions = 5
	_, err = EnsureTopics(ctxT(t), adm, cfg5)
	if err == nil || !strings.Contains(err.Error(), "3 partitions") || !strings.Contains(err.Error(), "5") {
		t.Fatalf("mismatch: got %v, want an error naming 3 and 5", err)
	}

	missing := cfg
	missing.Cluster += "-none"
	missing.Partitions = 0
	if _, err := EnsureTopics(ctxT(t), adm, missing); err == nil {
		t.Fatal("no partition count and no topic: want an error")
	}
}
