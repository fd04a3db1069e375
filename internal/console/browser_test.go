package console_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/server"
)

// seeded is what seed made, for the checks.
type seeded struct {
	event, area string
	reservation string
	orderID     string
	jobIDs      []string
}

// seed gives every workload data through its public API, as clients would.
func seed(t *testing.T, base string) seeded {
	t.Helper()
	s := seeded{event: "gala", area: "A"}
	call(t, "POST", base+"/v1/event", adminToken, map[string]any{"eventName": s.event, "artist": "console test",
		"areas": []map[string]any{{"areaId": "A", "price": 10, "rowCount": 20, "colCount": 40}, {"areaId": "B", "price": 20, "rowCount": 5, "colCount": 10}}},
		http.StatusOK, nil)
	for i := range 5 {
		var r struct{ ReservationID string }
		call(t, "POST", base+"/v2/reservations", adminToken, map[string]any{"userId": fmt.Sprint("u", i), "eventId": s.event,
			"areaId": "B", "numOfSeats": 2, "type": "RANDOM"}, http.StatusCreated, &r)
		s.reservation = r.ReservationID
	}

	var cust struct{ CustomerID string }
	call(t, "POST", base+"/api/customers", adminToken, map[string]any{"email": "ops@example.com", "name": "Console Test"}, http.StatusCreated, &cust)
	var prod struct{ ProductID string }
	call(t, "POST", base+"/api/products", adminToken, map[string]any{"sku": "SKU-1", "name": "Widget", "price": 5, "quantityOnHand": 100}, http.StatusCreated, &prod)
	order := map[string]any{"customerId": cust.CustomerID, "lineItems": []map[string]any{{"productId": prod.ProductID, "quantity": 2, "unitPrice": 5}}}
	var done struct{ OrderID string }
	call(t, "POST", base+"/api/orders", adminToken, order, http.StatusCreated, &done)
	// A saga that completes, before the fault is on.
	call(t, "GET", base+"/api/orders/"+done.OrderID+"?wait=30s", adminToken, nil, http.StatusOK, nil)
	// With the fault on the next order's saga parks a step: stuck, with a dead letter.
	call(t, "POST", base+"/api/admin/fault?enabled=true", adminToken, nil, http.StatusOK, nil)
	var stuck struct{ OrderID string }
	call(t, "POST", base+"/api/orders", adminToken, order, http.StatusCreated, &stuck)
	s.orderID = stuck.OrderID

	call(t, "POST", base+"/jq.AdminService/CreateQueue", adminToken, map[string]any{"name": "mail"}, http.StatusOK, nil)
	for i := range 3 {
		var j struct{ JobID string }
		payload := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, `{"to":"user%d"}`, i))
		call(t, "POST", base+"/jq.JobService/SubmitJob", adminToken, map[string]any{"queueName": "mail", "payload": payload}, http.StatusOK, &j)
		s.jobIDs = append(s.jobIDs, j.JobID)
	}
	call(t, "POST", base+"/jq.WorkerService/RegisterWorker", adminToken, map[string]any{"workerId": "w1", "hostname": "box", "concurrency": 4, "queues": []string{"mail"}}, http.StatusOK, nil)

	// Client seqs 1 and 3: seq 2 is the gap that holds the group.
	call(t, "POST", base+"/v1/groups/feed/messages", adminToken, map[string]any{"messages": []map[string]any{
		{"seq": 1, "id": "m1", "payload": map[string]any{"n": 1}}, {"seq": 3, "id": "m3", "payload": map[string]any{"n": 3}}}}, http.StatusCreated, nil)
	call(t, "POST", base+"/v1/groups/feed/lease", adminToken, map[string]any{"processor": "p1", "max": 2}, http.StatusOK, nil)
	call(t, "POST", base+"/v1/groups/feed/complete", adminToken, map[string]any{"processor": "p1", "seqs": []int{1, 3}}, http.StatusOK, nil)
	call(t, "POST", base+"/v1/groups/feed/consumers/c1/commit", adminToken, map[string]any{"position": 1}, http.StatusOK, nil)
	return s
}

// TestConsoleInChromium opens every page of the console in a real
// headless Chromium against a real server holding data of all four
// workloads, with tokens on, and acts from the pages: each page shows its
// data with no console error or exception; the seat map follows a spike;
// a stuck saga's dead letter is replayed from the page and the API sees
// it gone; a job is cancelled and a queue paused from the page and the API
// confirms both; a read-only token sees the data and no action button.
func TestConsoleInChromium(t *testing.T) {
	b := newBrowser(t)
	base, _ := serve(t, func(c *server.Config) { c.Auth.Tokens = tokens(t) })
	s := seed(t, base)
	ctx := b.ctx
	b.signIn(ctx, adminToken)
	b.open(ctx, base, "overview")
	b.until(ctx, "the signed-in token", `document.getElementById('who').textContent.includes('ops')`)

	t.Log("step: overview")
	{
		b.until(ctx, "the partitions", `document.querySelectorAll('#partitions tbody tr').length === 4`)
		b.until(ctx, "health", `document.querySelector('.card .v.ok')`)
		b.until(ctx, "an apply rate (a second poll)", `document.querySelectorAll('.card .v')[3].textContent !== '–'`)
		// The page refreshes at most once a second, and keeps refreshing.
		const window = 5 * time.Second
		before := overviewReads(t, base)
		time.Sleep(window)
		if n := overviewReads(t, base) - before; n < 1 || n > window.Seconds()+1 {
			t.Errorf("the overview page read /v1/admin/overview %v times in %v; want 1 to %v", n, window, window.Seconds()+1)
		}
		// A hidden tab reads nothing (one refresh in flight may finish),
		// and a tab shown again refreshes at once.
		setHidden := func(hidden bool) {
			eval[any](b, ctx, fmt.Sprintf(`Object.defineProperty(document, 'hidden', {value: %t, configurable: true});
				document.dispatchEvent(new Event('visibilitychange'))`, hidden))
		}
		setHidden(true)
		time.Sleep(1500 * time.Millisecond) // the refresh in flight, if any, ends
		before = overviewReads(t, base)
		time.Sleep(window)
		// At most one: a refresh in flight when the tab was hidden, slow
		// on a busy machine, may still finish in the window.
		if n := overviewReads(t, base) - before; n > 1 {
			t.Errorf("the hidden overview page read /v1/admin/overview %v times in %v", n, window)
		}
		setHidden(false)
		waitAPI(t, "the overview refreshed once shown again", func() bool { return overviewReads(t, base) > before })
		b.screenshot(ctx, "overview")
	}
	t.Log("step: ticketing seat map follows a spike")
	{
		b.open(ctx, base, "ticketing?event="+s.event)
		b.until(ctx, "the event list", `document.querySelector('#events-table') && document.querySelector('#events-table').textContent.includes('gala')`)
		sold := `Number((document.querySelector('canvas[data-area="A"]') || {dataset: {}}).dataset.sold)`
		b.until(ctx, "area A's seat map", sold+` === 0`)
		// The spike comes in waves; the map must show each before the next.
		for wave := 1; wave <= spikeWaves; wave++ {
			spike(t, base, s, wave, spikeWave)
			b.until(ctx, fmt.Sprintf("area A's seat map after wave %d", wave), fmt.Sprintf(sold+` === %d`, wave*spikeWave))
		}
		b.typeInto(ctx, "#reservation-id", s.reservation)
		b.click(ctx, `#page-ticketing form button[type="submit"]`)
		b.until(ctx, "the reservation looked up", `document.getElementById('reservation').textContent.includes('RESERVED')`)
		b.screenshot(ctx, "ticketing")
	}
	t.Log("step: commerce dead letter replayed")
	{
		b.open(ctx, base, "commerce")
		b.until(ctx, "the dead letter", `document.querySelector('#dlq-table button[data-action="Replay"]')`)
		b.until(ctx, "the stuck saga", `document.querySelector('#sagas-table') && document.querySelector('#sagas-table').textContent.includes('`+s.orderID+`')`)
		b.click(ctx, `#orders-table a[data-order="`+s.orderID+`"]`)
		b.until(ctx, "the saga timeline", `document.querySelector('#timeline')`)
		b.screenshot(ctx, "commerce")
		call(t, "POST", base+"/api/admin/fault?enabled=false", adminToken, nil, http.StatusOK, nil)
		var parked []struct{ ID string }
		call(t, "GET", base+"/api/admin/dlq", adminToken, nil, http.StatusOK, &parked)
		for _, e := range parked {
			row := `#dlq-table tr[data-key="` + e.ID + `"]`
			b.click(ctx, row+` button[data-action="Replay"]`)
			b.until(ctx, "dead letter "+e.ID+" gone from the page", `!document.querySelector('`+row+`')`)
		}
		b.until(ctx, "the empty dead-letter queue", `document.getElementById('dlq-empty')`)
		var count struct{ Count int }
		call(t, "GET", base+"/api/admin/dlq/count", adminToken, nil, http.StatusOK, &count)
		if count.Count != 0 {
			t.Errorf("the API counts %d dead letters after the page replayed them", count.Count)
		}
		var order struct{ Status string }
		waitAPI(t, "the replayed order to finish", func() bool {
			call(t, "GET", base+"/api/orders/"+s.orderID, adminToken, nil, http.StatusOK, &order)
			return order.Status != "PENDING"
		})
	}
	t.Log("step: jobs cancel and pause")
	{
		b.open(ctx, base, "jobs?queue=mail")
		job := s.jobIDs[0]
		b.until(ctx, "the queue's jobs", `document.querySelector('#jobs-table button[data-action="Cancel"][data-job="`+job+`"]')`)
		b.until(ctx, "the worker", `document.querySelector('#workers-table') && document.querySelector('#workers-table').textContent.includes('w1')`)
		b.click(ctx, `#jobs-table a[data-job="`+s.jobIDs[1]+`"]`)
		b.until(ctx, "the job's payload and log", `document.querySelector('#job-log tbody tr') && document.getElementById('job-detail').textContent.includes('user1')`)
		b.screenshot(ctx, "jobs")
		b.click(ctx, `#jobs-table button[data-action="Cancel"][data-job="`+job+`"]`)
		var st struct{ Job struct{ Status string } }
		waitAPI(t, "the job cancelled", func() bool {
			call(t, "POST", base+"/jq.JobService/GetJobStatus", adminToken, map[string]any{"jobId": job}, http.StatusOK, &st)
			return st.Job.Status == "DEAD_LETTERED"
		})
		b.click(ctx, `#queues-table button[data-action="Pause"][data-queue="mail"]`)
		var qs struct {
			Queues []struct {
				Name   string
				Paused bool
			}
		}
		waitAPI(t, "the queue paused", func() bool {
			call(t, "POST", base+"/jq.AdminService/ListQueues", adminToken, map[string]any{}, http.StatusOK, &qs)
			for _, q := range qs.Queues {
				if q.Name == "mail" {
					return q.Paused
				}
			}
			return false
		})
		b.until(ctx, "the Resume button", `document.querySelector('#queues-table button[data-action="Resume"][data-queue="mail"]')`)
		// The cancelled job can be retried from the page (it waits: the queue is paused).
		b.until(ctx, "the Retry button", `document.querySelector('#jobs-table button[data-action="Retry"][data-job="`+job+`"]')`)
		b.click(ctx, `#jobs-table button[data-action="Retry"][data-job="`+job+`"]`)
		waitAPI(t, "the job retried", func() bool {
			call(t, "POST", base+"/jq.JobService/GetJobStatus", adminToken, map[string]any{"jobId": job}, http.StatusOK, &st)
			return st.Job.Status == "PENDING"
		})
		b.click(ctx, `#workers-table button[data-action="Drain"][data-worker="w1"]`)
		var ws struct {
			Workers []struct{ WorkerID, Status string }
		}
		waitAPI(t, "the worker draining", func() bool {
			call(t, "POST", base+"/jq.AdminService/ListWorkers", adminToken, map[string]any{}, http.StatusOK, &ws)
			for _, w := range ws.Workers {
				if w.WorkerID == "w1" {
					return w.Status == "DRAINING"
				}
			}
			return true // drained and gone
		})
	}
	t.Log("step: sequencer")
	{
		b.open(ctx, base, "sequencer")
		b.until(ctx, "the group held by its gap", `document.querySelector('#groups-table') && document.querySelector('#groups-table').textContent.includes('seq 2 (unpublished)')`)
		b.until(ctx, "the consumer", `document.querySelector('#consumers-table') && document.querySelector('#consumers-table').textContent.includes('c1')`)
		b.screenshot(ctx, "sequencer")
	}
	t.Log("step: read-only token sees no action")
	{
		ro := b.tab()
		// Signing in through the form: the console asks who it is
		// without a token first (401, expected), then with the one typed.
		b.open(ro, base, "overview")
		b.until(ro, "the sign-in form", `!document.getElementById('login').hidden`)
		b.typeInto(ro, "#token", readToken)
		b.click(ro, `#login button[type="submit"]`)
		b.until(ro, "the reader signed in", `document.getElementById('who').textContent.includes('viewer')`)
		b.forget("401 (Unauthorized) " + base + "/v1/auth/whoami")
		for _, page := range []struct{ name, ready string }{
			{"ticketing", `document.querySelector('#events-table')`},
			{"commerce", `document.querySelector('#orders-table tbody tr') && document.querySelector('#dlq').textContent.includes('commerce:admin')`},
			{"jobs?queue=mail", `document.querySelector('#jobs-table tbody tr') && document.querySelector('#queues-table tbody tr')`},
			{"sequencer", `document.querySelector('#groups-table tbody tr')`},
		} {
			b.open(ro, base, page.name)
			b.until(ro, page.name+" as the reader", page.ready)
			if n := eval[int](b, ro, `document.querySelectorAll('button.act').length`); n != 0 {
				t.Errorf("%s: the read-only token sees %d action buttons", page.name, n)
			}
		}
	}
	b.noProblems()
}

// The spike on area A (20 × 40 seats): waves of one-seat reservations.
const spikeWaves, spikeWave = 4, 150

// spike makes one wave of n one-seat reservations in area A from 8
// clients at once.
func spike(t *testing.T, base string, s seeded, wave, n int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				call(t, "POST", base+"/v2/reservations", adminToken, map[string]any{"userId": fmt.Sprint("s", wave, "-", i), "eventId": s.event,
					"areaId": s.area, "numOfSeats": 1, "type": "RANDOM"}, http.StatusCreated, nil)
			}
		})
	}
	wg.Wait()
}

// overviewReads is how many reads of the overview the server answered.
func overviewReads(t *testing.T, base string) float64 {
	t.Helper()
	_, text := get(t, base+"/metrics", "")
	n := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "surge_http_requests_total{") && strings.Contains(line, `route="GET /v1/admin/overview"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

// waitAPI polls ok until it holds, failing after waitFor.
func waitAPI(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen through the API after %v", what, waitFor)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
