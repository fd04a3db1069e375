// Package deploy_test checks deploy/prometheus and deploy/grafana against
// real software: Debian's Prometheus (scripts/prometheus.sh) scraping a
// real `surge serve`, embedded and a cluster node on Kafka, under a short
// load of every workload. Every rule and every dashboard query must return
// data, so a renamed metric fails the build.
package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

const (
	// readyTimeout bounds the wait for a started process to answer.
	readyTimeout = 60 * time.Second
	// dataTimeout bounds the wait for every query to return data: a few
	// scrapes (every second) and rule evaluations after the load.
	dataTimeout = 90 * time.Second
	rulesFile   = "prometheus/surge-rules.yml"
	rulesTests  = "prometheus/surge-rules.test.yml"
)

// TestAlertsFireOnTheirSignals runs the rules' unit tests: each alert
// fires on the series that should raise it (and only then).
func TestAlertsFireOnTheirSignals(t *testing.T) {
	installPrometheus(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTests}} {
		if out, err := exec.Command("promtool", args...).CombinedOutput(); err != nil {
			t.Fatalf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

func TestPrometheusRulesAndDashboardsAgainstRealServer(t *testing.T) {
	installPrometheus(t)
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	bin := buildSurge(t)
	embedded := startSurge(t, bin, "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--saga-deadline", sagaDeadline.String(), "--job-lease", jobLease.String())
	node := startSurge(t, bin, "--kafka", kafkatest.Brokers(t), "--cluster", kafkatest.Topic(t, "deploy"), "--partitions", fmt.Sprint(nodePartitions))
	waitOwned(t, node, nodePartitions)
	prom := startPrometheus(t, rules, embedded, node)
	runLoad(t, bin, embedded)
	runLoad(t, bin, node, "ticketing")
	compensatedOrder(t, embedded)
	stuckOrder(t, embedded)
	stuckJob(t, embedded)
	heldGroup(t, embedded)

	queries, nRules := ruleQueries(t, rules)
	for _, d := range dashboardFiles(t) {
		queries = append(queries, dashboardQueries(t, d)...)
	}
	waitAllNonEmpty(t, prom, append(queries, provoked...))
	checkRulesHealthy(t, prom, nRules)
	waitFiring(t, prom, "SurgeDeadLettersGrowing", "SurgeSagasTimingOut", "SurgeJobLeasesExpiring")
}

// nodePartitions is the cluster's partition count; its one node serves all.
const nodePartitions = 2

// waitOwned waits until the node at addr serves n partitions, so the
// load does not race their acquisition.
func waitOwned(t *testing.T, addr string, n int) {
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		owned := 0
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "surge_partition_owned{") && strings.HasSuffix(line, "} 1") {
					owned++
				}
			}
		}
		if owned == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster node serves %d of %d partitions after %v (err: %v)", owned, n, readyTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sagaDeadline is the embedded server's --saga-deadline: short, so the
// order stuckOrder places times out during the test.
const sagaDeadline = 2 * time.Second

// jobLease is the embedded server's --job-lease: long enough for the
// jobs load's workers (which heartbeat), short for stuckJob's.
const jobLease = 3 * time.Second

// stuckQueue is the queue every server has from the start.
const stuckQueue = "default"

// stuckJob runs a worker that never heartbeats on a job that hangs: its
// lease expires, which SurgeJobLeasesExpiring must report.
func stuckJob(t *testing.T, addr string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := jobclient.New("http://" + addr)
	w := jobclient.NewWorker(c, jobclient.WorkerConfig{Heartbeat: time.Hour, Concurrency: 1})
	started := make(chan struct{}, 1)
	jobclient.Handle(w, stuckQueue, func(ctx context.Context, _ *jobclient.Job[[]byte]) ([]byte, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		w.StopNow()
		<-done
	})
	if _, err := c.Submit(ctx, stuckQueue, []byte("{}"), jobclient.SubmitOptions{}); err != nil {
		t.Fatalf("submit a job: %v", err)
	}
	select {
	case <-started:
	case <-time.After(readyTimeout):
		t.Fatalf("the stuck job did not reach its worker in %v", readyTimeout)
	}
}

// provoked are what the load and the provoking helpers must have made
// happen, each a query that returns a series only when it did: a panel's
// query returns series of zeros too, and would pass without them.
var provoked = []query{
	{"a saga completed", `sum(surge_commerce_saga_seconds_count{outcome="completed"}) > 0`},
	{"a saga compensated (compensatedOrder)", `sum(surge_commerce_saga_seconds_count{outcome="compensated"}) > 0`},
	{"a saga timed out (stuckOrder)", `sum(surge_commerce_saga_seconds_count{outcome="timed_out"}) > 0`},
	{"stock reserved", `sum(surge_commerce_stock_units{state="reserved"}) > 0`},
	{"a job started", `sum(surge_jobs_start_delay_seconds_count{queue="default"}) > 0`},
	{"a worker slot busy (stuckJob)", `sum(surge_jobs_worker_slots{state="busy"}) > 0`},
	{"seats taken", `sum(surge_ticketing_seats{state="taken"}) > 0`},
	{"a group held by a gap (heldGroup)", `sum(surge_sequencer_groups{state="held"}) > 0`},
	{"messages held behind the gap", `sum(surge_sequencer_group_held_messages) > 0`},
	{"the held group's lag", `max(surge_sequencer_group_lag_seconds) > 0`},
}

// compensatedOrder places an order for more than the product holds: its
// saga compensates.
func compensatedOrder(t *testing.T, addr string) {
	base := "http://" + addr
	var c struct{ CustomerID string }
	post(t, base+"/api/customers", `{"email":"short@example.com","name":"Short Stock"}`, &c)
	var p struct{ ProductID string }
	post(t, base+"/api/products", `{"sku":"SHORT","name":"Short","price":1,"quantityOnHand":1}`, &p)
	var o struct{ OrderID string }
	post(t, base+"/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":2}]}`, c.CustomerID, p.ProductID), &o)
	// Ended before stuckOrder turns fault injection on, which would park
	// its reservation.
	resp, err := http.Get(base + "/api/orders/" + o.OrderID + "?wait=20s")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Status string }
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.Status != "CANCELLED" {
		t.Fatalf("the order beyond the stock is %q (%v), want CANCELLED", got.Status, err)
	}
}

// heldGroup publishes seqs 2 and 3 of a client-numbered group and not 1:
// the group is held by the gap, which the sequencer panels show.
func heldGroup(t *testing.T, addr string) {
	post(t, "http://"+addr+"/v1/groups/deploy-held/messages", `{"messages":[{"id":"b","seq":2},{"id":"c","seq":3}]}`)
}

// stuckOrder turns commerce fault injection on and places an order: its
// reservation is parked in the dead-letter queue and its saga reaches the
// deadline, which two alerts must report.
func stuckOrder(t *testing.T, addr string) {
	base := "http://" + addr
	post(t, base+"/api/admin/fault?enabled=true", "")
	var c struct{ CustomerID string }
	post(t, base+"/api/customers", `{"email":"stuck@example.com","name":"Stuck Order"}`, &c)
	var p struct{ ProductID string }
	post(t, base+"/api/products", `{"sku":"STUCK","name":"Stuck","price":1,"quantityOnHand":5}`, &p)
	post(t, base+"/api/orders", fmt.Sprintf(`{"customerId":%q,"lineItems":[{"productId":%q,"quantity":1}]}`, c.CustomerID, p.ProductID))
}

func post(t *testing.T, u, body string, out ...any) {
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, b)
	}
	for _, o := range out {
		if err := json.Unmarshal(b, o); err != nil {
			t.Fatalf("POST %s: %v in %s", u, err, b)
		}
	}
}

// waitFiring polls Prometheus's alerts until each named one is firing.
func waitFiring(t *testing.T, prom string, names ...string) {
	deadline := time.Now().Add(dataTimeout)
	for {
		firing := map[string]bool{}
		resp, err := http.Get(prom + "/api/v1/alerts")
		if err == nil {
			var r struct {
				Data struct {
					Alerts []struct {
						Labels map[string]string `json:"labels"`
						State  string            `json:"state"`
					} `json:"alerts"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			for _, a := range r.Data.Alerts {
				if a.State == "firing" {
					firing[a.Labels["alertname"]] = true
				}
			}
		}
		var missing []string
		for _, n := range names {
			if !firing[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alerts %v not firing after %v (firing: %v, err: %v)", missing, dataTimeout, firing, err)
		}
		time.Sleep(time.Second)
	}
}

func installPrometheus(t *testing.T) {
	out, err := exec.Command("../scripts/prometheus.sh", "install").CombinedOutput()
	if err != nil {
		t.Fatalf("Prometheus is needed (Debian: apt-get install prometheus; scripts/prometheus.sh install does it as root): %v\n%s", err, out)
	}
}

func buildSurge(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "surge")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/surge")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startSurge runs `surge serve` with args on a free port until the test
// ends and returns its address once /healthz answers 200.
func startSurge(t *testing.T, bin string, args ...string) string {
	addr := freeAddr(t)
	logf, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("surge serve %v log:\n%s", args, tail(b))
		}
	})
	waitHTTP(t, "http://"+addr+"/healthz")
	return addr
}

func tail(b []byte) []byte {
	const keep = 4000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}

func waitHTTP(t *testing.T, u string) {
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %v", u, readyTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startPrometheus scrapes targets every second with rules, as
// deploy/prometheus/prometheus.yml does every 15 s.
func startPrometheus(t *testing.T, rules string, targets ...string) string {
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, a := range targets {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: surge
    static_configs: [{targets: [%s]}]
`, rules, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(freeAddr(t))
	cmd := exec.Command("../scripts/prometheus.sh", "start", cfgPath, dir, port)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SURGE_PROMETHEUS_WATCH_PID=%d", os.Getpid()))
	out, err := cmd.Output()
	t.Cleanup(func() { _ = exec.Command("../scripts/prometheus.sh", "stop", dir).Run() })
	if err != nil {
		t.Fatalf("scripts/prometheus.sh start: %v\n%s", err, out)
	}
	return "http://127.0.0.1:" + port
}

// runLoad runs a short `surge bench` of each workload (or of only those
// named) against the server at addr.
func runLoad(t *testing.T, bin, addr string, only ...string) {
	target := "http://" + addr
	loads := map[string][]string{
		"ticketing": {"ticketing", "-n", "300", "-a", "2", "-c", "2"},
		"commerce":  {"commerce", "--baseline=false", "--rate", "50", "--duration", "2s", "-c", "2"},
		"jobs":      {"jobs", "--baseline=false", "--rate", "100", "--duration", "2s", "-c", "4", "--drain", "5s"},
		"sequencer": {"sequencer", "--scenario", "peer", "-n", "200"},
	}
	names := only
	if len(names) == 0 {
		names = []string{"ticketing", "commerce", "jobs", "sequencer"}
	}
	for _, n := range names {
		args := append([]string{"bench"}, loads[n]...)
		if n == "ticketing" {
			args = append(args, "--baseline=false")
		}
		args = append(args, "--target", target)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("surge %v: %v\n%s", args, err, tail(out))
		}
	}
}

type query struct{ from, expr string }

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertForm is the shape every alert's expression has: a query compared
// with a threshold. Evaluated with `bool`, it returns a series (0 or 1)
// for each series of the query, whether the alert fires or not.
var alertForm = regexp.MustCompile(`^(?s)(.*\S)\s+(==|!=|>=|<=|>|<)\s+(-?[0-9.]+)$`)

// ruleQueries lists, from the rules file, each recording rule's
// expression and recorded name, and each alert's expression with bool.
// (Prometheus's own parsing of the file is checked by promtool and by
// checkRulesHealthy.)
func ruleQueries(t *testing.T, rules string) ([]query, int) {
	var rf ruleFile
	readRules(t, rules, &rf)
	var qs []query
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			switch {
			case r.Record != "":
				qs = append(qs, query{"record " + r.Record, r.Expr}, query{"recorded " + r.Record, r.Record})
			case r.Alert != "":
				m := alertForm.FindStringSubmatch(strings.TrimSpace(r.Expr))
				if m == nil {
					t.Errorf("alert %s: expression %q is not QUERY OP NUMBER, which this test evaluates with bool", r.Alert, r.Expr)
					continue
				}
				qs = append(qs, query{"alert " + r.Alert, m[1] + " " + m[2] + " bool " + m[3]})
			}
		}
	}
	if len(qs) == 0 {
		t.Fatalf("no rules in %s", rules)
	}
	return qs, n
}

// readRules reads the rules file with yamlRules (the module has no YAML
// dependency).
func readRules(t *testing.T, path string, v any) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(yamlRules(b), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// yamlRules turns the rule file's `- record:`/`- alert:` and `expr:`
// lines into JSON (the file keeps each expr on one line).
func yamlRules(b []byte) []byte {
	type rule struct {
		Record string `json:"record,omitempty"`
		Alert  string `json:"alert,omitempty"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, line := range strings.Split(string(b), "\n") {
		s := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(s, "- record:"):
			rules = append(rules, rule{Record: strings.TrimSpace(strings.TrimPrefix(s, "- record:"))})
		case strings.HasPrefix(s, "- alert:"):
			rules = append(rules, rule{Alert: strings.TrimSpace(strings.TrimPrefix(s, "- alert:"))})
		case strings.HasPrefix(s, "expr:") && len(rules) > 0:
			rules[len(rules)-1].Expr = strings.TrimSpace(strings.TrimPrefix(s, "expr:"))
		}
	}
	out, _ := json.Marshal(map[string]any{"groups": []any{map[string]any{"rules": rules}}})
	return out
}

func dashboardFiles(t *testing.T) []string {
	files, err := filepath.Glob("grafana/dashboards/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in deploy/grafana/dashboards: %v", err)
	}
	sort.Strings(files)
	return files
}

// datasourceUID is the uid deploy/grafana/provisioning/datasources gives
// the Prometheus datasource; every panel and query must name it.
const datasourceUID = "surge-prometheus"

type datasource struct {
	UID string `json:"uid"`
}

type panel struct {
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Panels     []panel    `json:"panels"`
	Targets    []struct {
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
}

func TestDashboardsUseTheProvisionedDatasource(t *testing.T) {
	b, err := os.ReadFile("grafana/provisioning/datasources/surge.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "uid: "+datasourceUID) {
		t.Fatalf("the provisioned datasource's uid is not %s", datasourceUID)
	}
	for _, f := range dashboardFiles(t) {
		dashboardQueries(t, f)
	}
}

// grafanaVars are the dashboard variables Grafana fills in; the test
// uses what Grafana would for a 1 s scrape.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$instance", ".*")

func dashboardQueries(t *testing.T, path string) []query {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string  `json:"title"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if len(p.Targets) > 0 && p.Datasource.UID != datasourceUID {
				t.Errorf("%s: panel %q uses datasource %q, not %q", path, p.Title, p.Datasource.UID, datasourceUID)
			}
			for _, tg := range p.Targets {
				if tg.Datasource.UID != datasourceUID {
					t.Errorf("%s: a query of panel %q uses datasource %q, not %q", path, p.Title, tg.Datasource.UID, datasourceUID)
				}
				qs = append(qs, query{fmt.Sprintf("%s / %s", d.Title, p.Title), grafanaVars.Replace(tg.Expr)})
			}
		}
	}
	walk(d.Panels)
	if len(qs) == 0 {
		t.Fatalf("%s has no panel queries", path)
	}
	return qs
}

// waitAllNonEmpty polls Prometheus until every query returns at least one
// series, and fails naming those that never do.
func waitAllNonEmpty(t *testing.T, prom string, qs []query) {
	pending := qs
	deadline := time.Now().Add(dataTimeout)
	for {
		var still []query
		var reasons []string
		for _, q := range pending {
			n, err := instantQuery(prom, q.expr)
			if err != nil || n == 0 {
				still = append(still, q)
				reasons = append(reasons, fmt.Sprintf("%s: %s (series: %d, err: %v)", q.from, q.expr, n, err))
			}
		}
		if len(still) == 0 {
			t.Logf("%d queries returned data", len(qs))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d queries returned no data after %v (a renamed or missing metric?):\n%s",
				len(still), len(qs), dataTimeout, strings.Join(reasons, "\n"))
		}
		pending = still
		time.Sleep(time.Second)
	}
}

func instantQuery(prom, expr string) (int, error) {
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s", r.Error)
	}
	return len(r.Data.Result), nil
}

// checkRulesHealthy requires Prometheus to report every rule evaluated
// without error, and as many rules as ruleQueries read (so none was
// missed by its line reader).
func checkRulesHealthy(t *testing.T, prom string, want int) {
	resp, err := http.Get(prom + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	var buf bytes.Buffer
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" {
				fmt.Fprintf(&buf, "%s: %s %s\n", rule.Name, rule.Health, rule.LastError)
			}
		}
	}
	if n != want || buf.Len() > 0 {
		t.Fatalf("Prometheus loaded %d rules, the test read %d; unhealthy:\n%s", n, want, buf.String())
	}
}
