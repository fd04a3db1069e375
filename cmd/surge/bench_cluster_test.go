package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
)

// The broker kafkatest.Brokers may start for this binary is stopped when
// its tests end; tests that never ask for one start nothing.
func TestMain(m *testing.M) { kafkatest.Main(m) }

// TestBenchTicketingCluster runs the bench as a user would, with a
// 2-node cluster on the real broker beside embedded and the do-nothing
// server: it must exit 0 (no errors, no double booking in any target) and
// report the cluster's row and its per-process figures.
func TestBenchTicketingCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds surge and runs a cluster on a real Kafka broker")
	}
	brokers := kafkatest.Brokers(t)
	bin := buildSurge(t)
	jsonPath := filepath.Join(t.TempDir(), "t.json")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "ticketing", "--cluster", "2", "--cluster-warmup", "0", "-a", "2", "-n", "2000", "-c", "2", "--json", jsonPath)
	cmd.Env = append(os.Environ(), kafkatest.EnvBrokers+"="+brokers)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("bench took %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("bench: %v\n%s\n%s", err, out, stderr.String())
	}
	for _, s := range []string{"surge cluster (2 nodes)", "node n1", "node n2",
		"broker CPU not measured", "OK: no double booking, no errors"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	rep, b := readTicketingReport(t, jsonPath)
	if !rep.OK || rep.Config.Cluster != 2 || len(rep.Flows) != 2 {
		t.Fatalf("report: %s", b)
	}
	for _, f := range rep.Flows {
		c := f.Cluster
		if c == nil || c.Reservations != 2000 || c.Errors != 0 || len(c.Nodes) != 2 || c.SeatsSold != c.SeatsOffered {
			t.Fatalf("%s: cluster %+v", f.Flow, c)
		}
		// Two clients, two nodes: each node had one client's share.
		owned := 0
		for _, n := range c.Nodes {
			if n.Reservations == 0 || n.CPUSeconds == nil || n.PeakRSSBytes == nil {
				t.Errorf("%s: node %+v", f.Flow, n)
			}
			owned += len(n.Owned)
		}
		if owned != 8 || c.NodesCPUSeconds == nil || c.BrokerCPUSeconds != nil || c.BrokerNote == "" {
			t.Errorf("%s: %d partitions owned, CPU %+v, note %q", f.Flow, owned, c.ClusterCPU, c.BrokerNote)
		}
	}
}
