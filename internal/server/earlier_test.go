package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
)

// earlierDirs hold each a data directory written by an earlier build of
// the server (by TestWriteEarlierData, on the date in its name) and what
// the reads listed in its reads.json answered then. A later build must
// load each (snapshots of every workload, and a log tail after them) and
// answer the same: log records and snapshots are forever, whatever is
// refactored.
const earlierDirs = "testdata/earlier"

// earlierRead is one request of the recorded reads, with its answer.
type earlierRead struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Body   string `json:"body,omitempty"`
	Status int    `json:"status"`
	Answer string `json:"answer"`
}

// earlierConfig keeps everything a script writes for ever (retention far
// beyond any test's lifetime) and snapshots often, so the directory holds
// both snapshots and a log tail.
func earlierConfig(dir string, ready chan<- string) Config {
	cfg := dataDirConfig(dir, 4, ready)
	cfg.SnapshotEvery = 25
	const century = 100 * 365 * 24 * time.Hour
	cfg.Settings = module.Settings{
		"job-retention":  century,
		"seq-retention":  century,
		"saga-retention": time.Duration(0),
		"saga-deadline":  century, // the parked saga stays parked
	}
	return cfg
}

// TestDataFromEarlierBuildLoads starts the server on a copy of the data
// directory an earlier build wrote and checks every recorded read answers
// exactly as it did.
func TestDataFromEarlierBuildLoads(t *testing.T) {
	dirs, err := os.ReadDir(earlierDirs)
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no earlier data in %s: %v", earlierDirs, err)
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) { loadEarlier(t, filepath.Join(earlierDirs, d.Name())) })
	}
}

func loadEarlier(t *testing.T, earlierDir string) {
	raw, err := os.ReadFile(filepath.Join(earlierDir, "reads.json"))
	if err != nil {
		t.Fatal(err)
	}
	var reads []earlierRead
	if err := json.Unmarshal(raw, &reads); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(earlierDir, "data"))); err != nil {
		t.Fatal(err)
	}
	base, stop := serveEarlier(t, dir)
	defer stop()
	c := compatClient{t: t, base: base}
	for _, r := range reads {
		st, b := c.req(r.Method, r.Path, r.Body)
		if st != r.Status || compacted(string(b)) != compacted(r.Answer) {
			t.Errorf("%s %s %s:\n got %d %s\nwant %d %s", r.Method, r.Path, r.Body, st, b, r.Status, r.Answer)
		}
	}
}

// compacted drops the whitespace between JSON tokens, which protojson
// varies on purpose from build to build.
func compacted(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}

func serveEarlier(t *testing.T, dir string) (base string, stop func()) {
	t.Helper()
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- Run(ctx, earlierConfig(dir, ready)) }()
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		cancel()
		t.Fatalf("the server refused the earlier data: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the server did not become ready")
	}
	return base, func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("stopping: %v", err)
		}
	}
}

// TestWriteEarlierData writes earlierDirs/<today> with today's build: a short
// script over all four workloads, then the reads whose answers later
// builds must reproduce. Run it only to add a new directory (with a new
// date), never to overwrite one: SURGE_WRITE_EARLIER=1 go test -run
// TestWriteEarlierData ./internal/server/
func TestWriteEarlierData(t *testing.T) {
	earlierDir := filepath.Join(earlierDirs, time.Now().UTC().Format(time.DateOnly))
	if os.Getenv("SURGE_WRITE_EARLIER") != "1" {
		t.Skip("set SURGE_WRITE_EARLIER=1 to write " + earlierDir)
	}
	if _, err := os.Stat(earlierDir); err == nil {
		t.Fatalf("%s exists: one a day", earlierDir)
	}
	dir := t.TempDir()
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	runCtx, stopRun := context.WithCancel(context.Background())
	go func() { errc <- Run(runCtx, earlierConfig(dir, ready)) }()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		t.Fatal(err)
	}
	c := compatClient{t: t, base: base}
	reads := writeEarlierScript(t, c)
	for i := range reads {
		st, b := c.req(reads[i].Method, reads[i].Path, reads[i].Body)
		reads[i].Status, reads[i].Answer = st, string(b)
	}
	// Copied live, as after a kill -9: snapshots and the log tail after
	// them, not the snapshots a clean shutdown writes. Nothing is written
	// meanwhile (no client, no timer due), once a snapshot in progress
	// has had time to finish.
	time.Sleep(2 * time.Second)
	err := os.CopyFS(filepath.Join(earlierDir, "data"), os.DirFS(dir))
	stopRun()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(earlierDir, "data", "LOCK"))
	out, _ := json.MarshalIndent(reads, "", "  ")
	if err := os.WriteFile(filepath.Join(earlierDir, "reads.json"), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeEarlierScript does what users of each workload do and returns the
// reads that show the resulting state.
func writeEarlierScript(t *testing.T, c compatClient) []earlierRead {
	var reads []earlierRead
	get := func(path string) { reads = append(reads, earlierRead{Method: "GET", Path: path}) }
	post := func(path, body string) { reads = append(reads, earlierRead{Method: "POST", Path: path, Body: body}) }
	must := func(method, path, body string) []byte {
		t.Helper()
		st, b := c.req(method, path, body)
		if st/100 != 2 {
			t.Fatalf("%s %s %s: %d %s", method, path, body, st, b)
		}
		return b
	}

	// Ticketing: an event, reservations that succeed, one that fails, a
	// cancellation, and the compatibility flow's POST.
	event := "earlier"
	must("POST", "/v1/event", `{"eventName":"earlier","areas":[{"areaId":"A","price":10,"rowCount":10,"colCount":10},{"areaId":"B","price":20,"rowCount":2,"colCount":2}]}`)
	get("/v2/events/" + event)
	for i := range 5 {
		seats := 2
		area := []string{"A", "B"}[i%2]
		r, _ := http.NewRequest("POST", c.base+"/v2/reservations", strings.NewReader(fmt.Sprintf(
			`{"userId":"u%d","eventId":"%s","areaId":"%s","numOfSeats":%d,"type":"RANDOM"}`, i, event, area, seats)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", fmt.Sprint("earlier-", i))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v struct{ ReservationID string }
		json.Unmarshal(b, &v)
		if v.ReservationID == "" {
			t.Fatalf("reservation %d: %d %s", i, resp.StatusCode, b)
		}
		get("/v2/reservations/" + v.ReservationID)
		if i == 2 {
			must("DELETE", "/v2/reservations/"+v.ReservationID, "")
		}
	}
	// The compatibility flow records failures too: B has 4 seats.
	for _, n := range []int{1, 9} {
		id := string(must("POST", "/v1/event/"+event+"/reservation", fmt.Sprintf(`{"userId":"compat","areaId":"B","numOfSeats":%d,"type":"RANDOM"}`, n)))
		get("/v1/reservation/" + strings.TrimSpace(id))
	}
	get("/v2/events/" + event)

	// Commerce: customers, products, orders through their sagas, a
	// cancellation after confirmation, a replenishment, and a step parked
	// in the dead-letter queue by the injected fault.
	customers, products := c.seedLoad(2)
	var orders []string
	for i := range 3 {
		o := c.id("POST", "/api/orders", fmt.Sprintf(`{"customerId":"%s","lineItems":[{"productId":"%s","quantity":%d},{"productId":"%s","quantity":1}]}`,
			customers[i%2], products[0], i+1, products[1]), "orderId")
		must("GET", "/api/orders/"+o+"?wait=10s", "")
		orders = append(orders, o)
	}
	must("PATCH", "/api/orders/"+orders[1]+"/cancel", `{"reason":"changed my mind","cancelledBy":"customer"}`)
	must("POST", "/api/products/"+products[1]+"/stock/replenish", `{"quantity":5,"reason":"restock"}`)
	must("POST", "/api/admin/fault?enabled=true", "")
	parked := c.id("POST", "/api/orders", fmt.Sprintf(`{"customerId":"%s","lineItems":[{"productId":"%s","quantity":1}]}`, customers[0], products[0]), "orderId")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, b := c.req("GET", "/api/admin/dlq/count", ""); strings.Contains(string(b), `"count":1`) || time.Now().After(deadline) {
			break
		}
	}
	must("POST", "/api/admin/fault?enabled=false", "")
	for _, id := range customers {
		get("/api/customers/" + id)
		get("/api/customers/" + id + "/events")
	}
	for _, id := range products {
		get("/api/products/" + id)
		get("/api/products/" + id + "/events")
	}
	for _, id := range append(orders, parked) {
		get("/api/orders/" + id)
		get("/api/orders/" + id + "/events")
		if id != parked { // it has none: the 404's timestamp is the clock's
			get("/api/payments/order/" + id)
		}
	}
	get("/api/admin/dlq/count")
	get("/api/admin/dlq")

	// Jobs, over the Connect protocol (JSON): a queue, jobs of several
	// priorities, a cancellation.
	must("POST", "/jq.AdminService/CreateQueue", `{"name":"earlier"}`)
	var jobIDs []string
	for i := range 4 {
		b := must("POST", "/jq.JobService/SubmitJob", fmt.Sprintf(`{"queue_name":"earlier","payload":"eyJuIjox","priority":%d}`, i*3))
		var v struct {
			JobID string `json:"jobId"`
		}
		json.Unmarshal(b, &v)
		if v.JobID == "" {
			t.Fatalf("SubmitJob: %s", b)
		}
		jobIDs = append(jobIDs, v.JobID)
	}
	must("POST", "/jq.JobService/CancelJob", fmt.Sprintf(`{"job_id":%q}`, jobIDs[1]))
	for _, id := range jobIDs {
		post("/jq.JobService/GetJobStatus", fmt.Sprintf(`{"job_id":%q}`, id))
		post("/jq.JobService/GetJobLogs", fmt.Sprintf(`{"job_id":%q}`, id))
	}
	post("/jq.AdminService/GetQueueStats", `{"name":"earlier"}`)
	post("/jq.AdminService/ListQueues", `{}`)

	// Sequencer: messages published, some leased and completed, the
	// output read and a consumer's position committed.
	for i := 1; i <= 6; i++ {
		must("POST", "/v1/groups/g1/messages", fmt.Sprintf(`{"id":"m%d","payload":{"n":%d}}`, i, i))
	}
	must("POST", "/v1/groups/g1/lease", `{"processor":"p1","max":4}`)
	// Completed out of order, none left leased: a lease would expire
	// when the data is loaded later and change what the reads show.
	must("POST", "/v1/groups/g1/complete", `{"processor":"p1","seqs":[4,1,3]}`)
	must("POST", "/v1/groups/g1/complete", `{"processor":"p1","seqs":[2]}`)
	must("POST", "/v1/groups/g1/consumers/c1/commit", `{"position":1}`)
	get("/v1/groups/g1")
	get("/v1/groups/g1/output?after=0")
	get("/v1/groups")
	return reads
}
