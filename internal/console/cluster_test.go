package console_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// clusterPartitions is the partition count of the cluster test.
const clusterPartitions = 4

// TestConsoleClusterOwners runs two cluster nodes on Kafka, the second a
// real `surge serve` process, and watches the overview of the first in
// Chromium: it shows both nodes and the partitions each owns, and once the
// second is killed (SIGKILL), the first as the owner of every partition.
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
	n2 := startProcess(t, "serve", "--addr", freeAddr(t), "--kafka", brokers, "--cluster", name, "--node-id", "n2",
		"--partitions", fmt.Sprint(clusterPartitions), "--kafka-session-timeout", "2s")
	b.open(b.ctx, base1, "overview")
	owns := func(id string) string {
		return fmt.Sprintf(`(document.querySelector('#nodes tr[data-key="%s"] td:nth-child(3)') || {textContent: ''}).textContent`, id)
	}
	b.until(b.ctx, "both nodes owning partitions", `document.querySelectorAll('#nodes tbody tr').length === 2 && `+
		owns("n1")+` !== '' && `+owns("n2")+` !== ''`)
	b.screenshot(b.ctx, "cluster")
	if err := n2.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	all := make([]string, clusterPartitions)
	for i := range all {
		all[i] = fmt.Sprint(i)
	}
	b.until(b.ctx, "n1 owning every partition once n2 stopped", `document.querySelectorAll('#nodes tbody tr').length === 1 && `+
		owns("n1")+` === '`+strings.Join(all, ", ")+`'`)
	b.noProblems()
}

// startProcess builds surge and runs it with args until the test ends,
// its output in the test's log on failure.
func startProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "surge")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/surge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	logf := filepath.Join(t.TempDir(), "surge.log")
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("surge %s:\n%s", strings.Join(args, " "), b)
		}
	})
	return cmd
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
