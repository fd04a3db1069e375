package cluster_test

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/workload/sequencer"
)

// probeGroups names one sequencer group per partition, so that a GET of
// each asks every partition's owner.
func probeGroups() []string {
	groups := make([]string, testPartitions)
	found := 0
	for i := 0; found < testPartitions; i++ {
		g := fmt.Sprintf("probe-%d", i)
		p := engine.PartitionOfHash(engine.Hash(sequencer.GroupKey(g)), testPartitions)
		if groups[p] == "" {
			groups[p] = g
			found++
		}
	}
	return groups
}

// failoverProbe is what clients of the healthy nodes saw after an event
// (a kill or a stop) that took a node's partitions away.
type failoverProbe struct {
	// served: from the event until every partition had answered, through
	// every healthy node, a query sent after the event.
	served time.Duration
	// refused are the queries answered 503 meanwhile: a query is retried
	// by the node it reached until its partition has an owner again, so
	// none should be refused when the failover takes less than the
	// engine's forward timeout.
	refused []string
}

// probeAfter sends, through each of nodes, a query for every partition,
// from now on, one after the other until one is answered, and says when
// every (node, partition) had its answer.
func probeAfter(t *testing.T, nodes []*testNode, groups []string, event time.Time) failoverProbe {
	t.Helper()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		res  failoverProbe
		last time.Time
	)
	deadline := event.Add(60 * time.Second)
	for _, n := range nodes {
		for p, g := range groups {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					st, b := do(t, "GET", n.base+"/v1/groups/"+g, "", nil)
					if st == http.StatusOK || st == http.StatusNotFound {
						mu.Lock()
						last = later(last, time.Now())
						mu.Unlock()
						return
					}
					mu.Lock()
					res.refused = append(res.refused, fmt.Sprintf("partition %d through %s after %v: %d %s", p, n.id, time.Since(event).Round(time.Millisecond), st, b))
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
				t.Errorf("partition %d through %s: no answer within 60 s", p, n.id)
			})
		}
	}
	wg.Wait()
	res.served = last.Sub(event)
	return res
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// writeLoad publishes to every partition through nodes until stop is
// closed, so that the node about to fail has a Kafka transaction open.
// Its answers do not matter: during the failover some are 503.
func writeLoad(t *testing.T, nodes []*testNode, groups []string, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := nodes[i%len(nodes)]
				g := groups[i%len(groups)]
				do(t, "POST", n.base+"/v1/groups/"+g+"/messages", fmt.Sprintf(`{"payload":{"n":%d}}`, i), nil)
			}
		})
	}
	return &wg
}

// A node that stops answering without leaving (SIGSTOP: a long GC pause,
// a frozen VM) is taken over like a crashed one: with the default session
// timeout, in a cluster of three, the time from the stop until the
// healthy nodes answer for every partition again is measured beside the
// time after a SIGKILL. Requests the healthy nodes were forwarding to
// the stopped node must not wait on it once the group has moved its
// partitions: queries sent through them during the failover are all
// answered, none refused.
func TestStoppedNodeFailsOverLikeAKilledOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs surge as a process")
	}
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "c")
	bin := buildSurge(t)
	session := cluster.DefaultSessionTimeout
	a := startNodeSession(t, brokers, name, "a", 0)
	b := startNodeSession(t, brokers, name, "b", 0)
	healthy := []*testNode{a, b}
	groups := probeGroups()

	measure := func(what string, sig syscall.Signal) failoverProbe {
		v, proc := startProcessSession(t, bin, brokers, name, what, freeAddr(t), 0)
		waitDivided(t, []*testNode{a, b, v})
		stop := make(chan struct{})
		load := writeLoad(t, []*testNode{a, b}, groups, stop)
		time.Sleep(500 * time.Millisecond)
		if err := proc.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		event := time.Now()
		t.Logf("%s: %v at %s", what, sig, event.UTC().Format("15:04:05.000"))
		res := probeAfter(t, healthy, groups, event)
		close(stop)
		load.Wait()
		t.Logf("%s: every partition answered through the healthy nodes %v after it (session timeout %v); %d queries refused meanwhile",
			what, res.served.Round(time.Millisecond), session, len(res.refused))
		for _, r := range res.refused {
			t.Logf("refused: %s", r)
		}
		endProcess(proc, sig)
		waitDivided(t, healthy)
		return res
	}
	killed := measure("killed", syscall.SIGKILL)
	stopped := measure("stopped", syscall.SIGSTOP)
	t.Logf("failover with the default %v session timeout: %v after SIGKILL, %v after SIGSTOP",
		session, killed.served.Round(time.Millisecond), stopped.served.Round(time.Millisecond))
	for _, r := range []failoverProbe{killed, stopped} {
		if len(r.refused) > 0 {
			t.Errorf("%d queries through healthy nodes refused during the failover, first: %s", len(r.refused), r.refused[0])
		}
		if limit := session + 10*time.Second; r.served > limit {
			t.Errorf("failover took %v, more than %v", r.served, limit)
		}
	}
}

// endProcess makes sure a process the test signalled is gone: a stopped
// one is killed (it would otherwise rejoin, which this test does not
// look at; TestStoppedNodeIsFenced does).
func endProcess(proc *exec.Cmd, sig syscall.Signal) {
	proc.Process.Kill()
	if sig == syscall.SIGSTOP {
		proc.Process.Signal(syscall.SIGCONT)
	}
	proc.Wait()
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
