package cluster_test

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
)

// startProcess runs `surge serve` as a process of its own, so that it can
// be killed with SIGKILL, as node id of cluster name.
func startProcess(t *testing.T, bin, brokers, name, id string) (*testNode, *exec.Cmd) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	logf := filepath.Join(t.TempDir(), id+".log")
	lf, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(bin, "serve", "--addr", addr, "--kafka", brokers, "--cluster", name, "--node-id", id,
		"--partitions", "6", "--kafka-session-timeout", "2s")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("node %s's log:\n%s", id, b)
		}
	})
	n := &testNode{id: id, base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, _ := do(t, "GET", n.base+"/healthz", "", nil); st == http.StatusOK {
			return n, cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s did not start", id)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node killed with SIGKILL in the middle of a spike: after the session
// timeout its partitions are served by the others, the spike completes
// (clients retry with their idempotency keys), and every acknowledged
// reservation is there with its seats, none sold twice.
func TestKilledNodesPartitionsMove(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs surge as a process")
	}
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "c")
	bin := filepath.Join(t.TempDir(), "surge")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/surge-run/surge/cmd/surge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	a := startNode(t, brokers, name, "a")
	b := startNode(t, brokers, name, "b")
	v, proc := startProcess(t, bin, brokers, name, "victim")
	owner := waitDivided(t, []*testNode{a, b, v})
	t.Logf("owners: %v", owner)
	createEvent(t, a)

	made := map[string]reservation{}
	reserveMany(t, []*testNode{a, b}, "before", 0, 48, made)
	done := make(chan struct{})
	during := map[string]reservation{}
	go func() {
		defer close(done)
		reserveMany(t, []*testNode{a, b}, "during", 48, 72, during)
	}()
	time.Sleep(50 * time.Millisecond)
	if err := proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitDivided(t, []*testNode{a, b})
	took := time.Since(killed)
	t.Logf("the killed node's partitions served again after %v", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("failover took %v, more than 10 s", took)
	}
	<-done
	for id, r := range during {
		made[id] = r
	}
	if len(made) != 120 {
		t.Errorf("%d of 120 reservations made (240 seats free)", len(made))
	}
	readBack(t, []*testNode{a, b}, made)
}
