package cluster_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/kafkatest"
)

// rollingLoad is ticketing traffic that keeps going while nodes restart:
// each client sends its reservations through the nodes in turn and
// retries one (same Idempotency-Key) on the next node when it is answered
// 503 or its node cannot be reached.
type rollingLoad struct {
	nodes []*testNode // the addresses stay; the processes behind them change
	// down is 1 + the index of the node being restarted, 0 when none is:
	// a node's connection errors are retryable only while it is down.
	down  atomic.Int32
	acked atomic.Int64

	mu      sync.Mutex
	made    map[string]reservation
	retries map[string]int // by node and reason
	errs    []string
}

// retryPause is how long a client waits before retrying on the next node.
const retryPause = 50 * time.Millisecond

// retryFor bounds the retries of one reservation: longer than the engine
// waits for a moving partition's new owner (15 s), so its own 503 comes
// first.
const retryFor = 20 * time.Second

// client sends reservations until stop is closed; it finishes the one it
// has started, so every reservation ends acknowledged or reported.
func (l *rollingLoad) client(t *testing.T, c int, stop <-chan struct{}) {
	next := c
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("roll-%d-%d", c, k)
		body := fmt.Sprintf(`{"userId":"u-%s","eventId":"concert","areaId":%q,"numOfSeats":2,"type":"RANDOM"}`, key, areas[(c+k)%len(areas)])
		deadline := time.Now().Add(retryFor)
		for {
			i := next % len(l.nodes)
			next++
			downBefore := l.down.Load()
			st, b := do(t, "POST", l.nodes[i].base+"/v2/reservations", body, map[string]string{"Idempotency-Key": key})
			if st == http.StatusCreated {
				var r reservation
				if err := json.Unmarshal(b, &r); err != nil {
					l.fail("reservation %s through %s: %v: %s", key, l.nodes[i].id, err, b)
					break
				}
				l.mu.Lock()
				l.made[r.ReservationID] = r
				l.mu.Unlock()
				l.acked.Add(1)
				break
			}
			reason, ok := retryable(st, b)
			if ok && reason != "503" && downBefore != int32(i+1) && l.down.Load() != int32(i+1) {
				ok = false // a running node must not refuse or drop connections
			}
			if !ok {
				l.fail("reservation %s through %s: %d %s", key, l.nodes[i].id, st, b)
				break
			}
			l.mu.Lock()
			l.retries[l.nodes[i].id+" "+reason]++
			l.mu.Unlock()
			if time.Now().After(deadline) {
				l.fail("reservation %s through %s: still %d after retrying for %v: %s", key, l.nodes[i].id, st, retryFor, b)
				break
			}
			time.Sleep(retryPause)
		}
	}
}

func (l *rollingLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, fmt.Sprintf(format, args...))
}

// retryable says whether a client may retry a request answered st, b (b
// is the transport's error when st is 0), and names the reason.
func retryable(st int, b []byte) (string, bool) {
	if st == http.StatusServiceUnavailable {
		return "503", true
	}
	if st != 0 {
		return "", false
	}
	for _, reason := range []string{"connection refused", "connection reset", "EOF"} {
		if strings.Contains(string(b), reason) {
			return reason, true
		}
	}
	return "", false
}

// Each node of a three-node cluster in turn is stopped with SIGTERM (it
// exits 0), started again with its node id and address, and given its
// share of the partitions back, while clients keep reserving through all
// three: no request fails beyond what a client retries, reservations go on
// being acknowledged while a node is down, and every acknowledged one is
// there afterwards, through every node, with its seats, none sold twice.
func TestRollingRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs surge as a process")
	}
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "c")
	bin := buildSurge(t)
	ids := []string{"a", "b", "c"}
	nodes := make([]*testNode, len(ids))
	procs := make([]*exec.Cmd, len(ids))
	for i, id := range ids {
		nodes[i], procs[i] = startProcess(t, bin, brokers, name, id)
	}
	waitDivided(t, nodes)
	// 6 × 2,000 seats: the load must not sell out while it runs.
	createEventSized(t, nodes[0], 20, 100)

	l := &rollingLoad{nodes: append([]*testNode(nil), nodes...), made: map[string]reservation{}, retries: map[string]int{}}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	const nClients = 4
	for c := range nClients {
		clients.Go(func() { l.client(t, c, stop) })
	}
	stopLoad := sync.OnceFunc(func() { close(stop); clients.Wait() })
	defer stopLoad()

	began := time.Now()
	time.Sleep(500 * time.Millisecond)
	for i, id := range ids {
		others := append(append([]*testNode(nil), nodes[:i]...), nodes[i+1:]...)
		l.down.Store(int32(i + 1))
		atTerm := l.acked.Load()
		termed := time.Now()
		if err := procs[i].Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- procs[i].Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("node %s after SIGTERM: %v, want exit status 0", id, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("node %s did not exit within 30 s of SIGTERM", id)
		}
		stopTook := time.Since(termed)
		atExit := l.acked.Load()
		// Its partitions were handed over as it left, so the others
		// serve them all already, and the load goes on through them.
		waitDivided(t, others)
		for wait := time.Now().Add(10 * time.Second); l.acked.Load() == atExit; {
			if time.Now().After(wait) {
				t.Fatalf("no reservation acknowledged in the 10 s after node %s exited", id)
			}
			time.Sleep(10 * time.Millisecond)
		}
		restarted := time.Now()
		downFor := restarted.Sub(termed) - stopTook
		nodes[i], procs[i] = startProcessAt(t, bin, brokers, name, id, strings.TrimPrefix(nodes[i].base, "http://"))
		atReady := l.acked.Load()
		readyTook := time.Since(restarted)
		waitDivided(t, nodes)
		l.down.Store(0)
		t.Logf("node %s: exited 0 %v after SIGTERM, down for %v, serving %v after its restart, partitions divided again %v after it; reservations acknowledged: %d while it stopped, %d while it was down or starting",
			id, stopTook.Round(time.Millisecond), downFor.Round(time.Millisecond), readyTook.Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond), atExit-atTerm, atReady-atExit)
	}
	time.Sleep(500 * time.Millisecond)
	stopLoad()
	took := time.Since(began)

	for _, e := range l.errs {
		t.Error(e)
	}
	total := 0
	for _, n := range l.retries {
		total += n
	}
	t.Logf("%d reservations acknowledged in %v (%.0f/s) by %d clients; %d retries: %v",
		len(l.made), took.Round(time.Millisecond), float64(len(l.made))/took.Seconds(), nClients, total, l.retries)
	readBack(t, nodes, l.made)
}
