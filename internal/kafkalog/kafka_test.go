package kafkalog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// testCluster returns a config for a cluster of its own, with its topics
// created.
func testCluster(t testing.TB, partitions int) Config {
	t.Helper()
	cfg := Config{
		Brokers:    strings.Split(kafkatest.Brokers(t), ","),
		Cluster:    kafkatest.Topic(t, "kl"),
		NodeID:     "node-a",
		Partitions: partitions,
		TxnTimeout: 5 * time.Second,
	}
	adm := testAdmin(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := EnsureTopics(ctx, adm, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n != partitions {
		t.Fatalf("EnsureTopics: %d partitions, want %d", n, partitions)
	}
	return cfg
}

func testAdmin(t testing.TB, cfg Config) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
