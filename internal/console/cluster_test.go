package console_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// clusterPartitions is the partition count of the cluster test.
const clusterPartitions = 4

// TestConsoleClusterOwners runs two cluster nodes on Kafka and watches
// the overview of the first in Chromium: it shows both nodes and the
// partitions each owns, and once the second node stops, the first as the
// owner of every partition.
func TestConsoleClusterOwners(t *testing.T) {
	b := newBrowser(t)
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "console")
	node := func(id string) func(*server.Config) {
		return func(c *server.Config) {
			c.DataDir = ""
			c.Partitions = clusterPartitions
			c.Cluster = server.ClusterConfig{Kafka: brokers, Cluster: name, NodeID: id, SessionTimeout: 2 * time.Second}
		}
	}
	base1, _ := serve(t, node("n1"))
	_, stop2 := serve(t, node("n2"))
	b.open(b.ctx, base1, "overview")
	owns := func(id string) string {
		return fmt.Sprintf(`(document.querySelector('#nodes tr[data-key="%s"] td:nth-child(3)') || {textContent: ''}).textContent`, id)
	}
	b.until(b.ctx, "both nodes owning partitions", `document.querySelectorAll('#nodes tbody tr').length === 2 && `+
		owns("n1")+` !== '' && `+owns("n2")+` !== ''`)
	b.screenshot(b.ctx, "cluster")
	stop2()
	all := make([]string, clusterPartitions)
	for i := range all {
		all[i] = fmt.Sprint(i)
	}
	b.until(b.ctx, "n1 owning every partition once n2 stopped", `document.querySelectorAll('#nodes tbody tr').length === 1 && `+
		owns("n1")+` === '`+strings.Join(all, ", ")+`'`)
	b.noProblems()
}
