package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/ids"
)

const (
	// clusterSessionTimeout is the nodes' --kafka-session-timeout: small,
	// so a node that dies during the bench does not hold its partitions
	// for the default 6 s. The broker script allows down to 1 s.
	clusterSessionTimeout = "6s"
	// clusterReadyTimeout covers the nodes' start, the group's rebalances
	// and every partition's topic creation, snapshot restore and replay.
	clusterReadyTimeout = 60 * time.Second
	// brokerStartTimeout covers a first fetch of Kafka's jars with mvn.
	brokerStartTimeout = 5 * time.Minute
)

// ClusterReport is one spike against a cluster of `surge serve --kafka`
// nodes. Its RunReport's server CPU is the nodes' plus the broker's; the
// nodes' alone when the broker's is not measured (BrokerNote says so).
type ClusterReport struct {
	RunReport
	Cluster string              `json:"cluster"` // the --cluster name, fresh per run
	Brokers string              `json:"brokers"`
	Nodes   []ClusterNodeReport `json:"nodes"`
	// ReadySeconds: from starting the nodes until every node answered
	// /healthz and every partition had an owner.
	ReadySeconds float64 `json:"readySeconds"`
	ClusterCPU
	// BrokerPID is the broker's java process (0 when not known);
	// BrokerPeakRSSBytes its VmHWM after the spike, since the broker
	// started (the bench starts one broker per invocation).
	BrokerPID          int    `json:"brokerPid,omitempty"`
	BrokerPeakRSSBytes *int64 `json:"brokerPeakRssBytes,omitempty"`
	// BrokerNote says why the broker's CPU is not measured, if it is not.
	BrokerNote string `json:"brokerNote,omitempty"`
	// Counters: the nodes' counters over the spike, summed; nil if a
	// node's /metrics could not be read.
	Counters *clusterCounters `json:"counters,omitempty"`
}

// clusterCounters are what the nodes' /metrics count that explains a
// cluster's cost: Kafka transactions (each a round of broker requests)
// and the appends they carry, produce time, and calls forwarded to a
// partition's owner.
type clusterCounters struct {
	Transactions   float64 `json:"kafkaTransactions"`
	Appends        float64 `json:"kafkaAppends"`
	ProduceSeconds float64 `json:"kafkaProduceSeconds"` // summed over appends
	Forwarded      float64 `json:"forwarded"`
	ForwardRetries float64 `json:"forwardRetries"`
}

func (c clusterCounters) minus(o clusterCounters) clusterCounters {
	return clusterCounters{c.Transactions - o.Transactions, c.Appends - o.Appends, c.ProduceSeconds - o.ProduceSeconds,
		c.Forwarded - o.Forwarded, c.ForwardRetries - o.ForwardRetries}
}

func sumCounters(cs []clusterCounters) clusterCounters {
	var t clusterCounters
	for _, c := range cs {
		t.Transactions += c.Transactions
		t.Appends += c.Appends
		t.ProduceSeconds += c.ProduceSeconds
		t.Forwarded += c.Forwarded
		t.ForwardRetries += c.ForwardRetries
	}
	return t
}

func readClusterCounters(ctx context.Context, base string) (clusterCounters, error) {
	m, err := scrape(ctx, base)
	if err != nil {
		return clusterCounters{}, err
	}
	return countersOf(m), nil
}

// countersOf reads clusterCounters from one scrape; a series the node
// does not have counts 0.
func countersOf(m metrics) clusterCounters {
	var c clusterCounters
	c.Transactions, _ = m.value("surge_kafka_txn_appends_count")
	c.Appends, _ = m.value("surge_kafka_txn_appends_sum")
	c.ProduceSeconds, _ = m.value("surge_kafka_produce_seconds_sum")
	c.Forwarded, _ = m.value("surge_cluster_forwarded_total", "result", "sent")
	c.ForwardRetries, _ = m.value("surge_cluster_forwarded_total", "result", "retry")
	return c
}

// ClusterNodeReport is one node of a ClusterReport.
type ClusterNodeReport struct {
	ID           string   `json:"nodeId"`
	Addr         string   `json:"addr"`
	CPUSeconds   *float64 `json:"cpuSeconds"`
	PeakRSSBytes *int64   `json:"peakRssBytes,omitempty"`
	// Reservations sent to this node by the clients attached to it; most
	// were forwarded to the partition's owner.
	Reservations int64 `json:"reservationsSent"`
	Owned        []int `json:"partitionsOwned"`
}

// ClusterCPU is the CPU arithmetic of a cluster run: per reservation, the
// nodes', the broker's, their sum, and the sum as a multiple of the
// embedded server's in the same invocation. Fields are nil when an input
// is missing.
type ClusterCPU struct {
	NodesCPUSeconds  *float64 `json:"nodesCpuSeconds"`
	BrokerCPUSeconds *float64 `json:"brokerCpuSeconds"`
	// CPUPerReservationUs: (all nodes + broker) / reservations.
	CPUPerReservationUs       *float64 `json:"cpuPerReservationUs"`
	NodesCPUPerReservationUs  *float64 `json:"nodesCpuPerReservationUs"`
	BrokerCPUPerReservationUs *float64 `json:"brokerCpuPerReservationUs"`
	// BrokerSharePercent: the broker's part of CPUPerReservationUs.
	BrokerSharePercent       *float64 `json:"brokerSharePercent"`
	EmbeddedPerReservationUs *float64 `json:"embeddedCpuPerReservationUs"`
	// MultipleOfEmbedded: CPUPerReservationUs over the embedded server's.
	MultipleOfEmbedded *float64 `json:"cpuMultipleOfEmbedded"`
}

// clusterCPU does ClusterCPU's arithmetic. nodes are the nodes' CPU
// seconds over the spike (a nil one makes the nodes' total unknown),
// broker the broker's (nil: not measured), embedded the embedded server's
// run (nil, or without CPU: no comparison).
func clusterCPU(reservations int64, nodes []*float64, broker *float64, embedded *RunReport) ClusterCPU {
	var c ClusterCPU
	perRes := func(sec float64) *float64 {
		v := sec * 1e6 / float64(reservations)
		return &v
	}
	sum, known := 0.0, len(nodes) > 0
	for _, n := range nodes {
		if n == nil {
			known = false
			break
		}
		sum += *n
	}
	if known {
		c.NodesCPUSeconds = &sum
	}
	c.BrokerCPUSeconds = broker
	if reservations <= 0 {
		return c
	}
	if embedded != nil && embedded.ServerCPUSeconds != nil && embedded.Reservations > 0 {
		v := *embedded.ServerCPUSeconds * 1e6 / float64(embedded.Reservations)
		c.EmbeddedPerReservationUs = &v
	}
	if known {
		c.NodesCPUPerReservationUs = perRes(sum)
	}
	if broker != nil {
		c.BrokerCPUPerReservationUs = perRes(*broker)
	}
	if known && broker != nil {
		c.CPUPerReservationUs = perRes(sum + *broker)
		if sum+*broker > 0 {
			share := 100 * *broker / (sum + *broker)
			c.BrokerSharePercent = &share
		}
		if e := c.EmbeddedPerReservationUs; e != nil && *e > 0 {
			m := *c.CPUPerReservationUs / *e
			c.MultipleOfEmbedded = &m
		}
	}
	return c
}

// kafkaBroker is the broker the cluster target runs on: one the bench
// started with scripts/kafka.sh (dir and script set), or one given from
// outside.
type kafkaBroker struct {
	addr   string
	pid    int // 0 when not known: its CPU is not measured
	dir    string
	script string
}

// findKafkaScript looks for scripts/kafka.sh in the directories above the
// surge binary (bin/surge of a checkout) and above the working directory.
func findKafkaScript(exe, cwd string) (string, error) {
	var tried []string
	for _, start := range []string{filepath.Dir(exe), cwd} {
		if start == "" || start == "." {
			continue
		}
		for d := start; ; d = filepath.Dir(d) {
			p := filepath.Join(d, "scripts", "kafka.sh")
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
		tried = append(tried, start)
	}
	return "", fmt.Errorf("--cluster needs a Kafka broker: set SURGE_KAFKA_BROKERS=host:port to use a running one "+
		"(e.g. started with `scripts/kafka.sh start DIR` from a Surge checkout), or give --kafka-script PATH/TO/scripts/kafka.sh; "+
		"no scripts/kafka.sh above %s", strings.Join(tried, " or "))
}

// startBroker runs `kafka.sh start DIR`. The script's watchdog stops the
// broker if the bench dies without stopping it.
func startBroker(ctx context.Context, script, dir string, logf func(string, ...any)) (*kafkaBroker, error) {
	ctx, cancel := context.WithTimeout(ctx, brokerStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, "start", dir)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SURGE_KAFKA_WATCH_PID=%d", os.Getpid()))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s start: %v\n%s", script, err, strings.TrimSpace(stderr.String()))
	}
	b := &kafkaBroker{dir: dir, script: script}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SURGE_KAFKA_BROKERS="); ok {
			b.addr = v
		}
	}
	if b.addr == "" {
		return nil, fmt.Errorf("%s start printed no SURGE_KAFKA_BROKERS=: %s", script, out)
	}
	if pb, err := os.ReadFile(filepath.Join(dir, "kafka.pid")); err == nil {
		b.pid, _ = strconv.Atoi(strings.TrimSpace(string(pb)))
	}
	logf("%s", strings.TrimSpace(stderr.String()))
	return b, nil
}

// stop stops a broker the bench started; one given from outside is left
// alone.
func (b *kafkaBroker) stop() error {
	if b == nil || b.script == "" {
		return nil
	}
	out, err := exec.Command("bash", b.script, "stop", b.dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s stop %s: %v: %s", b.script, b.dir, err, out)
	}
	return nil
}

// brokerFor returns the broker of the run, starting one the first time if
// none was given.
func (r *ticketingRun) brokerFor(ctx context.Context) (*kafkaBroker, error) {
	if r.broker != nil {
		return r.broker, nil
	}
	if r.o.KafkaBrokers != "" {
		r.broker = &kafkaBroker{addr: r.o.KafkaBrokers, pid: r.o.KafkaPID}
		return r.broker, nil
	}
	script := r.o.KafkaScript
	if script == "" {
		cwd, _ := os.Getwd()
		var err error
		if script, err = findKafkaScript(r.o.Exe, cwd); err != nil {
			return nil, err
		}
	}
	r.logf("starting a Kafka broker with %s", script)
	b, err := startBroker(ctx, script, filepath.Join(r.tmp, "kafka"), r.logf)
	if err != nil {
		return nil, err
	}
	r.broker = b
	return b, nil
}

// clusterStatus is the part of GET /v1/cluster the bench reads.
type clusterStatus struct {
	Partitions int `json:"partitions"`
	Owners     map[string]struct {
		NodeID string `json:"nodeId"`
	} `json:"owners"`
}

// clusterNodeState is what one node's /healthz says: "ok" on the first
// line, then "partitions: 0,3,5".
func clusterNodeState(ctx context.Context, client *http.Client, base string) (ok bool, owned []int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return false, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	first := true
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first {
			ok, first = resp.StatusCode == http.StatusOK && line == "ok", false
			continue
		}
		if list, found := strings.CutPrefix(line, "partitions:"); found {
			for _, f := range strings.Split(strings.TrimSpace(list), ",") {
				if p, err := strconv.Atoi(f); err == nil {
					owned = append(owned, p)
				}
			}
		}
	}
	return ok, owned, sc.Err()
}

// waitClusterReady waits until every node answers /healthz "ok", the
// nodes' engines between them serve every partition once (each node at
// least one if there are enough), and every node's /v1/cluster names those
// same owners: the group's rebalances are over and every node knows where
// to forward, so the spike does not measure partitions moving. It returns
// each node's partitions.
func waitClusterReady(ctx context.Context, nodes []*child, ids []string) ([][]int, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(clusterReadyTimeout)
	why := "not started"
	for {
		owned, ready := make([][]int, len(nodes)), true
		for i, n := range nodes {
			select {
			case <-n.exited:
				return nil, fmt.Errorf("%s exited before the cluster was ready (%v); its log: %s", n.name, n.waitErr, n.logPath)
			default:
			}
			ok, o, err := clusterNodeState(ctx, client, n.baseURL())
			if err != nil || !ok {
				ready, why = false, fmt.Sprintf("%s: /healthz not ok (%v)", ids[i], err)
				break
			}
			owned[i] = o
		}
		// Every node's view, not only one's: a node whose owner map is
		// still stale forwards to the previous owner and retries, which
		// the spike would measure as start-up noise.
		for i, n := range nodes {
			if !ready {
				break
			}
			var st clusterStatus
			if err := getJSON(ctx, client, n.baseURL()+"/v1/cluster", &st); err != nil {
				ready, why = false, fmt.Sprintf("%s: /v1/cluster: %v", ids[i], err)
			} else if reason := partitionsDivided(st, owned, ids); reason != "" {
				ready, why = false, ids[i]+": "+reason
			}
		}
		if ready {
			return owned, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster not ready after %s: %s; node logs: %s", clusterReadyTimeout, why, nodes[0].logPath)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// partitionsDivided says why the partitions are not yet settled over the
// nodes (ids[i] serving owned[i]) as one node's status st sees them, or ""
// when they are.
func partitionsDivided(st clusterStatus, owned [][]int, ids []string) string {
	if st.Partitions <= 0 {
		return "no partition count yet"
	}
	server := map[int]string{}
	served := map[int]int{}
	for i, o := range owned {
		if len(o) == 0 && st.Partitions >= len(owned) {
			return fmt.Sprintf("%s serves no partition yet", ids[i])
		}
		for _, p := range o {
			served[p]++
			server[p] = ids[i]
		}
	}
	for p := range st.Partitions {
		if served[p] != 1 {
			return fmt.Sprintf("partition %d served by %d nodes", p, served[p])
		}
		o, ok := st.Owners[strconv.Itoa(p)]
		if !ok {
			return fmt.Sprintf("partition %d has no owner in its map yet", p)
		}
		if o.NodeID != server[p] {
			return fmt.Sprintf("partition %d: its map says %s, %s serves it", p, o.NodeID, server[p])
		}
	}
	return ""
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// cluster runs the spike against a fresh cluster of r.o.Cluster nodes on
// loopback, its clients spread over the nodes, and stops the nodes.
func (r *ticketingRun) cluster(ctx context.Context, flow string, embedded *RunReport) (*ClusterReport, error) {
	broker, err := r.brokerFor(ctx)
	if err != nil {
		return nil, err
	}
	name := "bench-" + flow + "-" + ids.New().String()[:8]
	cr := &ClusterReport{Cluster: name, Brokers: broker.addr, BrokerPID: broker.pid}
	cn := &clusterNodes{}
	defer cn.kill()
	t0 := time.Now()
	if err := r.startClusterNodes(flow, name, broker.addr, cn); err != nil {
		return nil, err
	}
	r.logf("%s: started a cluster %q of %d nodes on %s (broker %s); waiting for every partition to have an owner",
		flow, name, len(cn.nodes), strings.Join(cn.bases, " "), broker.addr)
	owned, err := waitClusterReady(ctx, cn.nodes, cn.ids)
	if err != nil {
		return nil, err
	}
	cr.ReadySeconds = time.Since(t0).Seconds()
	r.logf("%s: cluster ready in %.1f s", flow, cr.ReadySeconds)

	cpus := cn.cpuReaders(broker, cr)
	counters := &counterMarks{r: r, ctx: ctx, nodes: cn.nodes}
	run, deltas, err := r.spike(ctx, flow, cn.bases[0], cn.bases, true, counters.mark, cpus...)
	if err != nil {
		return nil, err
	}
	cr.Counters = counters.delta()
	cr.RunReport = *run
	cr.Server = fmt.Sprintf("surge cluster (%d nodes)", len(cn.nodes))
	brokerCPU := cr.measureBroker(broker, deltas[len(cn.nodes):])
	cr.ClusterCPU = clusterCPU(run.Reservations, deltas[:len(cn.nodes)], brokerCPU, embedded)
	cr.Nodes = cn.reports(run, deltas, owned)
	cn.stopAll(r.logf)
	return cr, nil
}

// clusterNodes are the `surge serve --kafka` processes of one cluster
// run, with their node ids and base URLs, in start order.
type clusterNodes struct {
	nodes      []*child
	ids, bases []string
}

// startClusterNodes starts r.o.Cluster nodes of cluster name into cn (the
// ones started before an error stay in cn, for its kill).
func (r *ticketingRun) startClusterNodes(flow, name, brokers string, cn *clusterNodes) error {
	for i := range r.o.Cluster {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		id := fmt.Sprintf("n%d", i+1)
		args := []string{"serve", "--addr", addr, "--kafka", brokers, "--cluster", name,
			"--node-id", id, "--advertise", addr, "--kafka-session-timeout", clusterSessionTimeout}
		if r.o.Partitions > 0 {
			args = append(args, "--partitions", strconv.Itoa(r.o.Partitions))
		}
		if r.o.Pprof {
			args = append(args, "--pprof")
		}
		n, err := r.spawn("cluster-"+flow+"-"+id, args, addr)
		if err != nil {
			return err
		}
		cn.nodes, cn.ids, cn.bases = append(cn.nodes, n), append(cn.ids, id), append(cn.bases, n.baseURL())
	}
	return nil
}

func (cn *clusterNodes) kill() {
	for _, n := range cn.nodes {
		n.kill()
	}
}

// cpuReaders read each node's CPU seconds and then, if its process is
// known, the broker's; without it cr's BrokerNote says why.
func (cn *clusterNodes) cpuReaders(broker *kafkaBroker, cr *ClusterReport) []func() (float64, error) {
	cpus := make([]func() (float64, error), 0, len(cn.nodes)+1)
	for _, n := range cn.nodes {
		cpus = append(cpus, n.cpuSeconds)
	}
	if broker.pid > 0 {
		pid := broker.pid
		cpus = append(cpus, func() (float64, error) { return procCPUSeconds(pid) })
	} else {
		cr.BrokerNote = "broker CPU not measured: the broker was given from outside (SURGE_KAFKA_BROKERS) without --kafka-pid"
	}
	return cpus
}

// reports are the nodes' lines of the report: CPU over the spike (deltas
// in node order), the reservations the clients sent each, the partitions
// each owned, their peak memory.
func (cn *clusterNodes) reports(run *RunReport, deltas []*float64, owned [][]int) []ClusterNodeReport {
	var out []ClusterNodeReport
	for i, n := range cn.nodes {
		nr := ClusterNodeReport{ID: cn.ids[i], Addr: n.addr, CPUSeconds: deltas[i], Owned: owned[i]}
		if i < len(run.PerNode) {
			nr.Reservations = run.PerNode[i]
		}
		if peak, _, err := n.memory(); err == nil {
			nr.PeakRSSBytes = &peak
		}
		out = append(out, nr)
	}
	return out
}

// stopAll stops the nodes together: one by one, each stop would hand its
// partitions to the nodes still running, only for them to hand them on
// again.
func (cn *clusterNodes) stopAll(logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, n := range cn.nodes {
		wg.Go(func() {
			if err := n.stop(); err != nil {
				logf("warning: %s: %v", n.name, err)
			}
		})
	}
	wg.Wait()
}

// counterMarks reads the nodes' counters at the spike's start and end
// marks; a node whose /metrics fails leaves that mark empty.
type counterMarks struct {
	r             *ticketingRun
	ctx           context.Context
	nodes         []*child
	before, after []clusterCounters
}

func (m *counterMarks) mark() {
	snap := make([]clusterCounters, len(m.nodes))
	for i, n := range m.nodes {
		var err error
		if snap[i], err = readClusterCounters(m.ctx, n.baseURL()); err != nil {
			m.r.logf("warning: %s: /metrics: %v", n.name, err)
			snap = nil
			break
		}
	}
	if m.before == nil {
		m.before = snap
	} else {
		m.after = snap
	}
}

// delta is the nodes' counters over the spike, summed; nil without both
// marks.
func (m *counterMarks) delta() *clusterCounters {
	if m.before == nil || m.after == nil {
		return nil
	}
	c := sumCounters(m.after).minus(sumCounters(m.before))
	return &c
}

// measureBroker returns the broker's CPU over the spike (from the CPU
// deltas after the nodes': one if the broker's process is known; nil for
// a broker given from outside) and records its peak memory, saying in
// BrokerNote why the CPU is missing if it is.
func (cr *ClusterReport) measureBroker(broker *kafkaBroker, deltas []*float64) *float64 {
	if broker.pid <= 0 {
		return nil
	}
	if deltas[0] == nil {
		cr.BrokerNote = fmt.Sprintf("broker CPU not measured: /proc/%d/stat could not be read", broker.pid)
	}
	if peak, _, err := procMemory(broker.pid); err == nil {
		cr.BrokerPeakRSSBytes = &peak
	}
	return deltas[0]
}
