package server

import (
	"log/slog"
	"strings"
	"testing"
)

func TestClusterConfigDefaults(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	c, err := ClusterConfig{Kafka: "k:9092", Cluster: "blue"}.resolve("10.0.0.5:8080", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if c.Advertise != "10.0.0.5:8080" || !strings.HasSuffix(c.NodeID, "-8080") {
		t.Errorf("advertise %q, node id %q", c.Advertise, c.NodeID)
	}
	// No host to advertise: loopback, so nodes on this machine still work.
	c, err = ClusterConfig{Kafka: "k:9092", Cluster: "blue", NodeID: "n1"}.resolve(":8081", quiet)
	if err != nil || c.Advertise != "127.0.0.1:8081" || c.NodeID != "n1" {
		t.Errorf("advertise %q, node id %q, %v", c.Advertise, c.NodeID, err)
	}
	for _, bad := range []ClusterConfig{
		{Kafka: "k:9092"},
		{Kafka: "k:9092", Cluster: "blue", NodeID: "a/b"},
		{Kafka: "k:9092", Cluster: "blue", Advertise: "no-port"},
	} {
		if _, err := bad.resolve("127.0.0.1:8080", quiet); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
