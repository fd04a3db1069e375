package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/jsonscan"
)

// planCounts runs the planner over n iterations the way the scheduler
// does and counts what each kind should be.
type planCounts struct{ orders, reserves, customers, polls, longPolls int64 }

func countPlan(seed uint64, n int64) planCounts {
	var c planCounts
	p := &planner{seed: seed}
	for i := range n {
		m, mode := p.next(i)
		switch {
		case m.roll < commerceOrderRoll:
			c.orders++
		case m.roll < commerceReserveRoll:
			c.reserves++
		default:
			c.customers++
		}
		switch mode {
		case sagaPoll:
			c.polls++
		case sagaLongPoll:
			c.longPolls++
		}
	}
	return c
}

func TestCommerceMixIsThePeersAndDeterministic(t *testing.T) {
	const n = 200_000
	c := countPlan(1, n)
	pct := func(x int64) float64 { return 100 * float64(x) / n }
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"orders", pct(c.orders), 60}, {"reserves", pct(c.reserves), 25}, {"customers", pct(c.customers), 15},
		{"timed sagas", pct(c.polls + c.longPolls), 6},
	} {
		if x.got < x.want-0.5 || x.got > x.want+0.5 {
			t.Errorf("%s %.2f %% of iterations, want %.0f %%", x.name, x.got, x.want)
		}
	}
	if d := c.polls - c.longPolls; d < 0 || d > 1 {
		t.Errorf("polled %d and long-polled %d sagas: want them to alternate", c.polls, c.longPolls)
	}
	// Every customer and product is used; the same seed gives the same
	// iterations, another seed others.
	cust, prod := map[int]bool{}, map[int]bool{}
	differ := 0
	for i := range int64(10_000) {
		m := commerceMix(1, i)
		cust[m.customer], prod[m.product] = true, true
		if m != commerceMix(1, i) {
			t.Fatalf("iteration %d differs between two plans of one seed", i)
		}
		if m != commerceMix(2, i) {
			differ++
		}
	}
	if len(cust) != commerceCustomers || len(prod) != commerceProducts {
		t.Errorf("used %d customers and %d products, want all %d and %d", len(cust), len(prod), commerceCustomers, commerceProducts)
	}
	if differ < 9_900 {
		t.Errorf("seeds 1 and 2 share %d of 10,000 iterations", 10_000-differ)
	}
	if first, again := countPlan(1, 1000), countPlan(1, 1000); first != again {
		t.Error("the plan is not deterministic")
	}
	if id, again := uuidOf(42), uuidOf(42); id != again || id == uuidOf(43) || len(id) != 36 || id[14] != '4' {
		t.Errorf("uuidOf: %s %s", uuidOf(42), uuidOf(43))
	}
}

func TestCommerceStockSufficesForTheRun(t *testing.T) {
	o := CommerceOptions{Rate: 1000, Duration: time.Minute}
	if s := o.stockPerProduct(); s != commerceStock {
		t.Errorf("1,000 it/s for 60 s: stock %d, want the peer's %d", s, commerceStock)
	}
	o = CommerceOptions{Levels: []float64{10000, 20000}, Duration: 10 * time.Minute}
	// 18 M iterations, 85 % take a unit, over 100 products, twice over.
	if s, want := o.stockPerProduct(), int64(2*18_000_000*85/100/100); s != want {
		t.Errorf("stock %d, want %d", s, want)
	}
}

func TestJSONString(t *testing.T) {
	for _, c := range []struct{ in, name, want string }{
		{`{"orderId":"o-1","status":"PENDING"}`, "status", "PENDING"},
		{`{ "orderId" : "o-1" , "status" :  "CONFIRMED" }`, "status", "CONFIRMED"},
		{`{"note":"orderId","orderId":"x9"}`, "orderId", "x9"},
		{`{"orderId":12}`, "orderId", ""},
		{`{"other":"a"}`, "orderId", ""},
		{`{"orderId":"unterminated`, "orderId", ""},
	} {
		if got := string(jsonscan.Field([]byte(c.in), c.name)); got != c.want {
			t.Errorf("jsonString(%s, %s) = %q, want %q", c.in, c.name, got, c.want)
		}
	}
}

func runCommerceTest(t *testing.T, o CommerceOptions) (*CommerceReport, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	o.Stdout, o.Stderr = &out, &errOut
	o.JSONPath = filepath.Join(t.TempDir(), "commerce.json")
	err := RunCommerce(ctx, o)
	b, rerr := os.ReadFile(o.JSONPath)
	if rerr != nil {
		t.Fatalf("no JSON report: %v (run: %v)\n%s\n%s", rerr, err, out.String(), errOut.String())
	}
	var rep CommerceReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep, out.String() + errOut.String(), err
}

// checkCounts asserts that one run's counts add up and match the plan.
func checkCounts(t *testing.T, r *CommerceRunReport, seed uint64) {
	t.Helper()
	if r.NotSent != 0 || r.Errors != 0 || len(r.ErrorsByKind) != 0 {
		t.Fatalf("not sent %d, errors %d %v %v", r.NotSent, r.Errors, r.ErrorsByKind, r.ErrorSamples)
	}
	if r.Orders+r.Reserves+r.Customers != r.Iterations {
		t.Fatalf("orders %d + reserves %d + customers %d != iterations %d", r.Orders, r.Reserves, r.Customers, r.Iterations)
	}
	want := countPlan(seed, r.Iterations)
	if r.Orders != want.orders || r.Reserves != want.reserves || r.Customers != want.customers ||
		r.SagasPolled != want.polls || r.SagasLongPoll != want.longPolls {
		t.Fatalf("counts %+v, want the plan's %+v", r, want)
	}
	if r.HTTP[reqOrder].Count != r.Orders || r.HTTP[reqReserve].Count != r.Reserves || r.HTTP[reqCustomer].Count != r.Customers {
		t.Fatalf("latency counts %+v do not match the requests", r.HTTP)
	}
	if r.SagaPoll.Count != r.SagasPolled || r.SagaLongPoll.Count != r.SagasLongPoll || r.SagaPoll.Count == 0 || r.SagaLongPoll.Count == 0 {
		t.Fatalf("saga counts: polled %d timed %d, long-polled %d timed %d", r.SagasPolled, r.SagaPoll.Count, r.SagasLongPoll, r.SagaLongPoll.Count)
	}
	if r.HTTPAll.Count != r.Iterations+r.HTTP[reqPoll].Count || r.HTTP[reqPoll].Count < r.SagasPolled {
		t.Fatalf("all requests %d, iterations %d, poll GETs %d", r.HTTPAll.Count, r.Iterations, r.HTTP[reqPoll].Count)
	}
	if r.HTTPAll.P50Us <= 0 || r.HTTPAll.P95Us < r.HTTPAll.P50Us || r.HTTPAll.P99Us < r.HTTPAll.P95Us || r.HTTPAll.MaxUs < r.HTTPAll.P99Us {
		t.Fatalf("latency out of order: %+v", r.HTTPAll)
	}
}

// TestCommerceAgainstNullServer: 1 s at 200 it/s against the do-nothing
// server; every due iteration is sent and the counts add up.
func TestCommerceAgainstNullServer(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			base := serve(t, NullHandler())
			rep, out, err := runCommerceTest(t, CommerceOptions{Rate: 200, Duration: time.Second, Clients: 2, MaxInflight: 1000,
				HTTP2: h2, Seed: 3, Options: Options{Target: base}})
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !rep.OK || len(rep.Levels) != 1 || rep.Levels[0].Server == nil || rep.Levels[0].Baseline != nil {
				t.Fatalf("report %+v", rep)
			}
			r := rep.Levels[0].Server
			if r.Iterations < 195 || r.Iterations > 202 {
				t.Fatalf("iterations %d in 1 s at 200/s", r.Iterations)
			}
			checkCounts(t, r, 3)
			if r.SagaPoll.Timeouts+r.SagaLongPoll.Timeouts != 0 {
				t.Fatalf("the do-nothing server confirms at once, yet sagas timed out: %+v %+v", r.SagaPoll, r.SagaLongPoll)
			}
			for _, want := range []string{"achieved rate", "order create", "polling every 200 ms", "long poll", "goals", "the peer", "OK: no errors"} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
			noTrackerNumbers(t, out)
		})
	}
}

// fakeCommerce confirms each order after confirmAfter (cancels every
// fifth), answers the long poll when the order is terminal, and refuses
// every third reservation with 409.
type fakeCommerce struct {
	confirmAfter time.Duration
	mu           sync.Mutex
	orders       map[string]time.Time
	seq, res     atomic.Int64
	waitGETs     atomic.Int64 // order GETs carrying ?wait=
}

func (f *fakeCommerce) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/customers", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"customerId":"c-%d","status":"ACTIVE"}`, f.seq.Add(1))
	})
	mux.HandleFunc("POST /api/products", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"productId":"p-%d","status":"ACTIVE"}`, f.seq.Add(1))
	})
	mux.HandleFunc("POST /api/products/{id}/stock/reserve", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Quantity int    `json:"quantity"`
			OrderID  string `json:"orderId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Quantity != 1 || !strings.HasPrefix(body.OrderID, "perftest-") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if f.res.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusConflict)
			return
		}
		fmt.Fprintf(w, `{"productId":%q}`, r.PathValue("id"))
	})
	mux.HandleFunc("POST /api/orders", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			CustomerID string `json:"customerId"`
			LineItems  []struct {
				ProductID string `json:"productId"`
				Quantity  int    `json:"quantity"`
				UnitPrice string `json:"unitPrice"`
			} `json:"lineItems"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.CustomerID == "" || len(body.LineItems) != 1 ||
			body.LineItems[0].UnitPrice != "10.00" || body.LineItems[0].Quantity != 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		id := fmt.Sprintf("o-%d", f.seq.Add(1))
		f.mu.Lock()
		f.orders[id] = time.Now()
		f.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"orderId":%q,"customerId":%q,"status":"PENDING"}`, id, body.CustomerID)
	})
	mux.HandleFunc("GET /api/orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		at, ok := f.orders[id]
		f.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		done := at.Add(f.confirmAfter)
		if r.URL.Query().Has("wait") {
			f.waitGETs.Add(1)
		}
		if wait, err := time.ParseDuration(r.URL.Query().Get("wait")); err == nil && time.Now().Before(done) {
			time.Sleep(min(time.Until(done), wait))
		}
		status := "PENDING"
		if !time.Now().Before(done) {
			status = "CONFIRMED"
			if n := len(id); id[n-1] == '5' {
				status = "CANCELLED"
			}
		}
		fmt.Fprintf(w, `{"orderId":%q,"status":%q}`, id, status)
	})
	return mux
}

// TestCommerceTimesSagasBothWays: against a server whose sagas take
// 300 ms, neither way of waiting reports a saga before it ended, a long
// poll needs one GET per saga and polling several; 409 reservations are
// answers, not errors. Only lower bounds on time are asserted: a busy
// machine can make anything slower, never faster.
func TestCommerceTimesSagasBothWays(t *testing.T) {
	f := &fakeCommerce{confirmAfter: 300 * time.Millisecond, orders: map[string]time.Time{}}
	base := serve(t, f.handler())
	rep, out, err := runCommerceTest(t, CommerceOptions{Rate: 200, Duration: time.Second, Clients: 2, MaxInflight: 1000,
		HTTP2: true, Seed: 5, Options: Options{Target: base}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r := rep.Levels[0].Server
	checkCounts(t, r, 5)
	if r.Reserve409 == 0 || r.Reserve409 > r.Reserves {
		t.Fatalf("409s %d of %d reservations", r.Reserve409, r.Reserves)
	}
	// Every saga takes 300 ms, so both medians are at least that (less the
	// histogram's rounding).
	if r.SagaPoll.P50Us < 295_000 || r.SagaLongPoll.P50Us < 295_000 {
		t.Errorf("sagas reported before they ended: polling p50 %d µs, long poll p50 %d µs, each must be ≥ 300 ms",
			r.SagaPoll.P50Us, r.SagaLongPoll.P50Us)
	}
	if got := f.waitGETs.Load(); got != r.SagasLongPoll {
		t.Errorf("%d long-poll GETs for %d long-polled sagas, want one each", got, r.SagasLongPoll)
	}
	if r.HTTP[reqPoll].Count < r.SagasPolled+1 {
		t.Errorf("%d poll GETs for %d polled sagas, want more than one for some", r.HTTP[reqPoll].Count, r.SagasPolled)
	}
}

func TestCommerceGoalsAndReport(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rss := int64(64 << 20)
	null := &CommerceRunReport{Server: "null", Iterations: 1000, AchievedPercent: 100, RateMet: true,
		HTTPAll: LatencyReport{Count: 1000, P50Us: 500, P95Us: 900, P99Us: 1000, MaxUs: 2000}, CPUPerIterUs: f(50)}
	srv := &CommerceRunReport{Server: "surge", Iterations: 990, AchievedPercent: 99.5, RateMet: true,
		HTTPAll:      LatencyReport{Count: 990, P50Us: 600, P95Us: 1200, P99Us: 1400, MaxUs: 3000},
		SagaLongPoll: SagaReport{LatencyReport: LatencyReport{Count: 30, P50Us: 5000, P95Us: 20000, P99Us: 25000, MaxUs: 30000}},
		ErrorsByKind: map[string]int64{"order create: status 500": 2}, Errors: 2, PeakRSSBytes: &rss,
		HTTP: map[string]LatencyReport{reqOrder: {Count: 10, P50Us: 1, P95Us: 2, P99Us: 3, MaxUs: 4}}}
	srv.setCPU(0.0792) // 80 µs per iteration, 12,500 per CPU-second
	l := &CommerceLevel{Rate: 1000, Server: srv, Baseline: null}
	l.judge()
	met := map[string]bool{}
	for _, g := range l.Goals {
		if g.Met == nil {
			t.Fatalf("goal %q not judged", g.Name)
		}
		met[g.Name] = *g.Met
	}
	want := map[string]bool{
		"achieved rate, % of target": true, "errors": false, "HTTP p99 ÷ do-nothing's": true,
		"saga E2E p99, long poll (ms)": false, "server CPU per iteration ÷ do-nothing's": true, "iterations per server CPU-second": true,
	}
	for k, v := range want {
		if got, ok := met[k]; !ok || got != v {
			t.Errorf("goal %q met=%v (present %v), want %v", k, got, ok, v)
		}
	}
	rep := &CommerceReport{Benchmark: "commerce", Peer: commercePeer, Config: CommerceConfig{DurationSeconds: 60, Clients: 4, HTTP2: true}, Levels: []*CommerceLevel{l}}
	var out bytes.Buffer
	writeCommerceLevel(&out, rep, l)
	for _, s := range []string{"1,000 iterations/s", "do-nothing server", "1.40×", "25.00 ms", "order create: status 500 errors: 2", "64 MiB", "80.0 µs", "≈ 200 iterations/s on 24 vCPU"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"serverCpuPerIterationUs":80`, `"sagaE2ELongPoll":{"count":30`, `"goals":[`, `"iterationsPerVcpuSecond":8`, `"baseline":{"server":"null"`} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("JSON lacks %s: %s", s, b)
		}
	}
}
