package sequencer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// newAPIServer runs the API over a real engine and log in a temp dir,
// with the hub fed by the engine's notes as `surge serve` does.
func newAPIServer(t *testing.T) (*httptest.Server, *API) {
	t.Helper()
	hub := NewHub(0)
	eng := openAPIEngine(t, func(_ int, wl uint8, v any) {
		if wl == WorkloadID {
			hub.Notify(v)
		}
	})
	mux := http.NewServeMux()
	a := NewAPI(eng, hub)
	a.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { a.Shutdown(); srv.Close(); eng.Close() })
	return srv, a
}

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// must does a request that must answer want and decodes the answer.
func must(t *testing.T, srv *httptest.Server, want int, method, path, body string) map[string]any {
	t.Helper()
	st, b := call(t, srv, method, path, body)
	if st != want {
		t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, st, b, want)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(b), &v); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, b)
	}
	return v
}

func seqsOf(t *testing.T, v map[string]any) []uint64 {
	t.Helper()
	var out []uint64
	for _, m := range v["messages"].([]any) {
		out = append(out, uint64(m.(map[string]any)["seq"].(float64)))
	}
	return out
}

func seqList(seqs []uint64) string {
	s := make([]string, len(seqs))
	for i, x := range seqs {
		s[i] = strconv.FormatUint(x, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func TestAPIPublishProcessConsume(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/orders"
	if v := must(t, srv, 201, "POST", g+"/messages", `{"id":"a","payload":{"n":1}}`); v["seq"] != 1.0 || v["id"] != "a" {
		t.Fatalf("first publish: %v", v)
	}
	if v := must(t, srv, 200, "POST", g+"/messages", `{"id":"a","payload":{"n":"other"}}`); v["seq"] != 1.0 {
		t.Fatalf("a repeat id answers its first seq: %v", v)
	}
	v := must(t, srv, 201, "POST", g+"/messages", `{"messages":[{"id":"b","payload":"two"},{"payload":[3]},{"id":"a"}]}`)
	if fmt.Sprint(v["seqs"]) != "[2 3 1]" {
		t.Fatalf("batch seqs: %v", v["seqs"])
	}
	if v := must(t, srv, 200, "POST", g+"/messages", `{"messages":[{"id":"b"}]}`); fmt.Sprint(v["seqs"]) != "[2]" {
		t.Fatalf("a batch of repeats: %v", v)
	}
	// Two processors lease; the second completes first, which holds its
	// message until the first one's is done.
	l1 := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p1","max":1,"leaseMs":10000}`)
	l2 := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p2","max":5}`)
	if s1, s2 := seqsOf(t, l1), seqsOf(t, l2); fmt.Sprint(s1, s2) != "[1] [2 3]" {
		t.Fatalf("leases: %v %v", s1, s2)
	}
	if m := l1["messages"].([]any)[0].(map[string]any); m["payload"].(map[string]any)["n"] != 1.0 || m["state"] != "LEASED" || m["processor"] != "p1" {
		t.Fatalf("leased message: %v", m)
	}
	must(t, srv, 200, "POST", g+"/extend", `{"processor":"p2","leaseMs":20000}`)
	c := must(t, srv, 200, "POST", g+"/complete", `{"processor":"p2","seqs":[3,2]}`)
	if c["position"] != 0.0 {
		t.Fatalf("released past a message still leased: %v", c)
	}
	if out := must(t, srv, 200, "GET", g+"/output", ""); len(out["messages"].([]any)) != 0 {
		t.Fatalf("output before seq 1 is done: %v", out)
	}
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p1","seqs":[1]}`)
	out := must(t, srv, 200, "GET", g+"/output?after=0&limit=2", "")
	if fmt.Sprint(seqsOf(t, out)) != "[1 2]" || out["position"] != 3.0 || out["firstKept"] != 1.0 {
		t.Fatalf("output: %v", out)
	}
	m := out["messages"].([]any)[1].(map[string]any)
	for _, f := range []string{"createdAt", "processingAt", "processedAt", "releasedAt"} {
		if _, err := time.Parse(time.RFC3339Nano, m[f].(string)); err != nil {
			t.Fatalf("%s: %v in %v", f, err, m)
		}
	}
	if out := must(t, srv, 200, "GET", g+"/output?after=2", ""); fmt.Sprint(seqsOf(t, out)) != "[3]" {
		t.Fatalf("output after 2: %v", out)
	}
	must(t, srv, 200, "POST", g+"/consumers/c1/commit", `{"position":2}`)
	info := must(t, srv, 200, "GET", g, "")
	if info["position"] != 3.0 || info["released"] != 1.0 || info["firstKept"] != 3.0 || info["mode"] != "server" ||
		fmt.Sprint(info["consumers"]) != "[map[name:c1 position:2]]" {
		t.Fatalf("info: %v", info)
	}
	if l := must(t, srv, 200, "GET", "/v1/groups", ""); len(l["groups"].([]any)) != 1 {
		t.Fatalf("list: %v", l)
	}
	// A processor that stops gives its leases back at once.
	must(t, srv, 201, "POST", g+"/messages", `{"payload":4}`)
	must(t, srv, 200, "POST", g+"/lease", `{"processor":"p3"}`)
	if v := must(t, srv, 200, "POST", g+"/release", `{"processor":"p3"}`); v["released"] != true {
		t.Fatalf("release: %v", v)
	}
	if v := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p4"}`); fmt.Sprint(seqsOf(t, v)) != "[4]" {
		t.Fatalf("released message not leased again: %v", v)
	}
	must(t, srv, 200, "DELETE", g, "")
	must(t, srv, 404, "GET", g, "")
	// A group nobody published to: a lease finds nothing, output is 404.
	if v := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p1"}`); len(v["messages"].([]any)) != 0 {
		t.Fatalf("lease of a deleted group: %v", v)
	}
	must(t, srv, 404, "GET", g+"/output", "")
}

func TestAPIClientSeqs(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/client"
	must(t, srv, 201, "POST", g+"/messages", `{"id":"x2","seq":2,"payload":2}`)
	if v := must(t, srv, 200, "GET", g, ""); v["missing"] != 1.0 || v["mode"] != "client" {
		t.Fatalf("gap not reported: %v", v)
	}
	l := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":10}`)
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":`+seqList(seqsOf(t, l))+`}`)
	if v := must(t, srv, 200, "GET", g, ""); v["position"] != 0.0 || v["processed"] != 1.0 {
		t.Fatalf("a gap must hold seq 2: %v", v)
	}
	must(t, srv, 201, "POST", g+"/messages", `{"id":"x1","seq":1,"payload":1}`)
	l = must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":10}`)
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":`+seqList(seqsOf(t, l))+`}`)
	if out := must(t, srv, 200, "GET", g+"/output", ""); fmt.Sprint(seqsOf(t, out)) != "[1 2]" {
		t.Fatalf("output once the gap is filled: %v", out)
	}
	// One request, one command: seqs done, repeated, unknown and leased
	// to another each get their outcome; the status is the first
	// refusal's, and what could be done was done.
	must(t, srv, 201, "POST", g+"/messages", `{"messages":[{"id":"x3","seq":3},{"id":"x4","seq":4},{"id":"x5","seq":5}]}`)
	must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":2}`)
	must(t, srv, 200, "POST", g+"/lease", `{"processor":"q","max":1}`)
	v := must(t, srv, 404, "POST", g+"/complete", `{"processor":"p","seqs":[4,4,9,5,3,1]}`)
	var outcomes []string
	for _, r := range v["results"].([]any) {
		outcomes = append(outcomes, r.(map[string]any)["outcome"].(string))
	}
	if fmt.Sprint(outcomes) != "[OK Same NotFound Conflict OK Same]" || v["position"] != 4.0 || !strings.Contains(v["error"].(string), "no message 9") {
		t.Fatalf("mixed completion: %v", v)
	}
}

// Every refusal names the problem and changes nothing.
func TestAPIBadInput(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/g"
	must(t, srv, 201, "POST", g+"/messages", `{"id":"m1","payload":1}`)
	must(t, srv, 200, "POST", g+"/lease", `{"processor":"p"}`)
	before := must(t, srv, 200, "GET", g, "")
	long := strings.Repeat("x", MaxNameLen+1)
	batch := make([]string, MaxBatch+1)
	for i := range batch {
		batch[i] = `{"payload":1}`
	}
	big := `{"payload":"` + strings.Repeat("x", MaxPayloadBytes) + `"}`
	for _, c := range []struct {
		want               int
		method, path, body string
		says               string
	}{
		{400, "POST", "/v1/groups/" + long + "/messages", `{"payload":1}`, "group name"},
		{400, "POST", g + "/messages", `{"payload":`, "malformed"},
		{400, "POST", g + "/messages", `{"seq":-1}`, "seq"},
		{400, "POST", g + "/messages", `{"id":"","payload":1}`, "id"},
		{400, "POST", g + "/messages", `{"payload":1,"messages":[{"payload":2}]}`, "not both"},
		{400, "POST", g + "/messages", `{"messages":[]}`, "1 to 1000"},
		{400, "POST", g + "/messages", `{"messages":[` + strings.Join(batch, ",") + `]}`, "1 to 1000"},
		{413, "POST", g + "/messages", big, "payload"},
		{400, "POST", g + "/messages", `{"seq":5,"payload":1}`, "server sequence"},
		{400, "POST", g + "/messages", `{"messages":[{"payload":1},{"seq":7}]}`, "nothing was published"},
		{400, "POST", g + "/lease", `{"processor":""}`, "processor"},
		{400, "POST", g + "/lease", `{"processor":"p","max":1001}`, "max"},
		{400, "POST", g + "/lease", `{"processor":"p","leaseMs":-1}`, "leaseMs"},
		{400, "POST", g + "/lease", `{"processor":"p","waitMs":60001}`, "waitMs"},
		{400, "POST", g + "/complete", `{"processor":"p","seqs":[]}`, "seqs"},
		{400, "POST", g + "/complete", `{"processor":"p","seqs":[0]}`, "seq 0"},
		{409, "POST", g + "/complete", `{"processor":"q","seqs":[1]}`, "not leased to"},
		{404, "POST", g + "/complete", `{"processor":"p","seqs":[9]}`, "no message 9"},
		{404, "POST", "/v1/groups/nope/complete", `{"processor":"p","seqs":[1]}`, "no group"},
		{400, "POST", g + "/extend", `{"processor":"p","leaseMs":3600001}`, "leaseMs"},
		{404, "POST", "/v1/groups/nope/extend", `{"processor":"p"}`, "no group"},
		{400, "GET", g + "/output?limit=0", "", "limit"},
		{400, "GET", g + "/output?after=-1", "", "after"},
		{400, "GET", g + "/output?wait=forever", "", "wait"},
		{400, "GET", g + "/output?wait=61s", "", "wait"},
		{400, "POST", g + "/consumers/c/commit", `{}`, "position is required"},
		{400, "POST", g + "/consumers/c/commit", `{"position":5}`, "past the released position"},
		{404, "POST", "/v1/groups/nope/consumers/c/commit", `{"position":0}`, "no group"},
		{404, "GET", "/v1/groups/nope", "", "no group"},
		{404, "DELETE", "/v1/groups/nope", "", "no group"},
		{400, "POST", "/messages", `{"name":"b","numberOfMessages":0}`, "numberOfMessages"},
		{400, "POST", "/messages", `{"name":"b","numberOfMessages":1,"processingTime":-1}`, "processingTime"},
		{400, "POST", "/messages", `{"name":"","numberOfMessages":1}`, "name"},
		{409, "POST", "/messages", `{"name":"g","numberOfMessages":1}`, "exists"},
		{400, "DELETE", "/messages", "", "name"},
		{404, "DELETE", "/messages?name=nope", "", "no group"},
		{400, "GET", "/list/stats", "", "name is required"},
		{404, "GET", "/list/sequenced/count?name=nope", "", "no group"},
	} {
		st, body := call(t, srv, c.method, c.path, c.body)
		if st != c.want || !strings.Contains(body, c.says) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s %.80s: %d %.300s, want %d saying %q", c.method, c.path, c.body, st, body, c.want, c.says)
		}
	}
	// A client seq in a client group far past the window: 429.
	must(t, srv, 201, "POST", "/v1/groups/cg/messages", `{"seq":1,"payload":1}`)
	if st, b := call(t, srv, "POST", "/v1/groups/cg/messages", fmt.Sprintf(`{"seq":%d}`, DefaultMaxUnreleased+5)); st != 429 {
		t.Errorf("window overflow: %d %s", st, b)
	}
	must(t, srv, 409, "POST", "/v1/groups/cg/messages", `{"id":"other","seq":1}`)
	if after := must(t, srv, 200, "GET", g, ""); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refusal changed the group:\n%v\n%v", before, after)
	}
	// Committing backwards is refused.
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":[1]}`)
	must(t, srv, 200, "POST", g+"/consumers/c/commit", `{"position":1}`)
	must(t, srv, 409, "POST", g+"/consumers/c/commit", `{"position":0}`)
}

// A lease long poll wakes on a publish; an output long poll wakes on the
// release that a lease and complete make.
func TestAPILongPolls(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/lp"
	type answer struct {
		v   map[string]any
		dur time.Duration
	}
	leased := make(chan answer, 1)
	start := time.Now()
	go func() {
		v := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":10,"waitMs":20000}`)
		leased <- answer{v, time.Since(start)}
	}()
	read := make(chan answer, 1)
	go func() {
		v := must(t, srv, 200, "GET", g+"/output?after=0&wait=20s", "")
		read <- answer{v, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond) // both are waiting
	select {
	case a := <-leased:
		t.Fatalf("lease answered before any publish: %v", a.v)
	default:
	}
	must(t, srv, 201, "POST", g+"/messages", `{"payload":"hello"}`)
	var l answer
	select {
	case l = <-leased:
	case <-time.After(10 * time.Second):
		t.Fatal("the lease long poll was not woken by the publish")
	}
	if fmt.Sprint(seqsOf(t, l.v)) != "[1]" {
		t.Fatalf("woken lease: %v", l.v)
	}
	select {
	case a := <-read:
		t.Fatalf("output answered before a release: %v", a.v)
	case <-time.After(50 * time.Millisecond):
	}
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":[1]}`)
	select {
	case r := <-read:
		if fmt.Sprint(seqsOf(t, r.v)) != "[1]" || r.dur > 15*time.Second {
			t.Fatalf("woken read: %v after %v", r.v, r.dur)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the output long poll was not woken by the release")
	}
	// A wait that passes answers an empty list.
	if v := must(t, srv, 200, "GET", g+"/output?after=1&wait=50ms", ""); len(v["messages"].([]any)) != 0 {
		t.Fatalf("empty wait: %v", v)
	}
}

// The stream sends every released message as an event with id = seq,
// and resumes after Last-Event-ID.
func TestAPIStream(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/st"
	publishAndRelease := func(n int) {
		for range n {
			must(t, srv, 201, "POST", g+"/messages", `{"payload":{"k":"v"}}`)
		}
		l := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":100}`)
		must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":`+seqList(seqsOf(t, l))+`}`)
	}
	publishAndRelease(3)
	open := func(lastID string) (*bufio.Reader, func()) {
		req, _ := http.NewRequest("GET", srv.URL+g+"/output/stream?after=1", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %v", resp.StatusCode, resp.Header)
		}
		return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
	}
	next := func(r *bufio.Reader) (id string, data map[string]any) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &data); err != nil {
					t.Fatal(err)
				}
			case line == "" && id != "":
				return id, data
			}
		}
	}
	r, closeStream := open("")
	for _, want := range []string{"2", "3"} {
		if id, d := next(r); id != want || d["seq"] != must2f(want) || d["payload"].(map[string]any)["k"] != "v" {
			t.Fatalf("event %s: id %s %v", want, id, d)
		}
	}
	publishAndRelease(1)
	if id, _ := next(r); id != "4" {
		t.Fatalf("live event: id %s", id)
	}
	closeStream()
	r, closeStream = open("3")
	defer closeStream()
	if id, _ := next(r); id != "4" {
		t.Fatalf("resumed after Last-Event-ID 3 at %s", id)
	}
	if st, b := call(t, srv, "GET", g+"/output/stream?after=x", ""); st != 400 {
		t.Fatalf("bad after: %d %s", st, b)
	}
}

func must2f(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

// The benchmark routes: the peer's script's run, at 5,000 messages.
func TestAPIBenchRoutes(t *testing.T) {
	srv, _ := newAPIServer(t)
	for _, c := range []struct {
		name                  string
		processing, creations int
	}{{"zero", 0, 0}, {"slow", 1, 0}} {
		const n = 5000
		must(t, srv, 202, "POST", "/messages", fmt.Sprintf(`{"name":%q,"numberOfMessages":%d,"creationDelay":%d,"processingTime":%d}`,
			c.name, n, c.creations, c.processing))
		deadline := time.Now().Add(30 * time.Second)
		for {
			// No ?name=: the group most recently created.
			st, body := call(t, srv, "GET", "/list/sequenced/count", "")
			if st != 200 {
				t.Fatalf("count: %d %s", st, body)
			}
			if body == strconv.Itoa(n) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s of %d sequenced after 30 s", c.name, body, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		s := must(t, srv, 200, "GET", "/list/stats?name="+c.name, "")
		if s["isOrdered"] != true || s["count"] != float64(n) || s["sent"] != float64(n) {
			t.Fatalf("%s stats: %v", c.name, s)
		}
		stages := s["stages"].(map[string]any)
		for _, name := range stageNames {
			st := stages[name].(map[string]any)
			if st["count"] != float64(n) || st["min"].(float64) > st["p50"].(float64) || st["p50"].(float64) > st["p99"].(float64) ||
				st["p99"].(float64) > st["max"].(float64) {
				t.Fatalf("%s stage %s: %v", c.name, name, st)
			}
		}
		// The median, not the minimum: the engine stamps a batch once, when
		// it starts, and a command that joins it later gets that earlier
		// time, so one message's stage can read a fraction of a ms short.
		if p := stages["processingToProcessed"].(map[string]any)["p50"].(float64); p < 0.9*float64(c.processing) {
			t.Fatalf("%s: processing took %v ms, under processingTime %d", c.name, p, c.processing)
		}
		p := must(t, srv, 200, "GET", "/list/perfs", "")
		if p["name"] != c.name || p["count"] != float64(n) || p["averageRate"].(float64) <= 0 || len(p["sequencing"].([]any)) == 0 {
			t.Fatalf("%s perfs: %v", c.name, p)
		}
		var total float64
		for _, sec := range p["processing"].([]any) {
			total += sec.(map[string]any)["count"].(float64)
		}
		if total != n {
			t.Fatalf("%s: per-second processing counts add up to %v", c.name, total)
		}
	}
	// Deleting a group stops its processors and frees its name.
	must(t, srv, 200, "DELETE", "/messages?name=zero", "")
	must(t, srv, 404, "GET", "/list/stats?name=zero", "")
	must(t, srv, 202, "POST", "/messages", `{"name":"zero","numberOfMessages":10,"creationDelay":1}`)
	must(t, srv, 200, "DELETE", "/messages?name=zero", "")
}

// A message out of place is caught by the order check and named.
func TestStatsOrderCheck(t *testing.T) {
	s := newStats("g", nil)
	s.sent = 3
	for i, id := range []string{"g-1", "g-3", "g-2"} {
		s.add(&Message{Seq: uint64(i + 1), ID: id, Created: 1, Processing: 2, Processed: 3, Released: 4})
	}
	if d := s.statsOut(); d.IsOrdered || d.BrokeAt != 2 || !strings.Contains(d.Reason, `"g-3"`) {
		t.Fatalf("order check: %+v", d)
	}
	s = newStats("g", nil)
	s.add(&Message{Seq: 1, Released: 10})
	s.add(&Message{Seq: 3, Released: 11})
	if d := s.statsOut(); d.IsOrdered || d.BrokeAt != 3 {
		t.Fatalf("a skipped seq: %+v", d)
	}
}

// Percentiles are within the histogram's error of the exact ones, and
// min, max and average are exact.
func TestHistogram(t *testing.T) {
	var h hist
	var vals []int64
	for i := range 100_000 {
		v := int64(i*i%1_000_003) * 1000
		vals = append(vals, v)
		h.add(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{.5, .9, .95, .99} {
		exact := vals[int(q*float64(len(vals)))-1]
		got := h.quantile(q)
		if d := float64(got-exact) / float64(exact); d > 0.02 || d < -0.02 {
			t.Errorf("q%v: %d, exact %d", q, got, exact)
		}
	}
	if h.min != vals[0] || h.max != vals[len(vals)-1] || h.quantile(1) != h.max || h.quantile(0) != h.min {
		t.Errorf("min %d max %d, want %d %d", h.min, h.max, vals[0], vals[len(vals)-1])
	}
	if len(h.counts) > 4000 {
		t.Errorf("%d buckets", len(h.counts))
	}
	for v := int64(0); v < 1<<20; v = v*5/4 + 1 {
		if got := histValue(histIndex(v)); float64(got-v) > 0.016*float64(v)+1 || float64(v-got) > 0.016*float64(v)+1 {
			t.Errorf("value %d in a bucket of %d", v, got)
		}
	}
}

// Shutdown answers waiting long polls at once and ends streams, so a
// graceful shutdown does not wait for them.
func TestAPIShutdownEndsWaits(t *testing.T) {
	srv, a := newAPIServer(t)
	done := make(chan int, 2)
	go func() {
		st, _ := call(t, srv, "POST", "/v1/groups/w/lease", `{"processor":"p","waitMs":60000}`)
		done <- st
	}()
	go func() {
		st, _ := call(t, srv, "GET", "/v1/groups/w/output/stream", "")
		done <- st
	}()
	for a.hub.Waiting() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	// The lease would wait 60 s and the stream for ever: ending well
	// within 20 s (generous for a busy machine) means Shutdown ended them.
	a.Shutdown()
	giveUp := time.After(20 * time.Second)
	for range 2 {
		select {
		case st := <-done:
			if st != 200 {
				t.Fatalf("ended with %d", st)
			}
		case <-giveUp:
			t.Fatal("a wait outlived Shutdown")
		}
	}
	if st, b := call(t, srv, "POST", "/messages", `{"name":"late","numberOfMessages":1}`); st != 503 {
		t.Fatalf("a benchmark after shutdown: %d %s", st, b)
	}
}

// TestBenchRunTime times one benchmark run through the routes, in
// process: SEQUENCER_BENCH_RUN=60000 go test -run TestBenchRunTime -v.
// It is a measurement, by hand; the machine it runs on is shared.
func TestBenchRunTime(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("SEQUENCER_BENCH_RUN"))
	if err != nil || n <= 0 {
		t.Skip("set SEQUENCER_BENCH_RUN=<messages> to time a run")
	}
	srv, _ := newAPIServer(t)
	start := time.Now()
	must(t, srv, 202, "POST", "/messages", fmt.Sprintf(`{"name":"run","numberOfMessages":%d,"processingTime":0}`, n))
	for {
		st, body := call(t, srv, "GET", "/list/sequenced/count?name=run", "")
		if st != 200 {
			t.Fatalf("count: %d %s", st, body)
		}
		if body == strconv.Itoa(n) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("%s of %d sequenced after 5 min", body, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(start)
	s := must(t, srv, 200, "GET", "/list/stats?name=run", "")
	if s["isOrdered"] != true || s["count"] != float64(n) {
		t.Fatalf("stats: %v", s)
	}
	t.Logf("%d messages sequenced in %v (%.0f/s)", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
}

// TestBenchGroupPastTheGroupLimit: a benchmark group its partition has no
// room for is reported as not created, not counted 0 for ever while its
// publisher retries a refusal that will not pass.
func TestBenchGroupPastTheGroupLimit(t *testing.T) {
	eng := enginetest.OpenEngine(t, t.TempDir(), engine.Options{Partitions: 1}, &Workload{Limits: Limits{MaxGroups: 1}})
	srv, _ := serveBoth(t, eng, NewAPI(eng, NewHub(0)))
	must(t, srv, 202, "POST", "/messages", `{"name":"one","numberOfMessages":3}`)
	must(t, srv, 202, "POST", "/messages", `{"name":"two","numberOfMessages":3}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, b := call(t, srv, "GET", "/list/sequenced/count?name=two", "")
		if st == http.StatusConflict && strings.Contains(b, "at most 1 groups per partition") {
			break
		}
		if st != 200 || b != "0" || time.Now().After(deadline) {
			t.Fatalf("count of a group past the limit: %d %s; want 409 naming the limit", st, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, b := call(t, srv, "GET", "/list/sequenced/count?name=one", ""); st != 200 {
		t.Fatalf("count of the group that fits: %d %s", st, b)
	}
}

// TestLeaseAnswerIsBounded: a lease's answer holds at most MaxLeaseBytes
// of payload, however many messages it may take: 1,000 messages of the
// largest payload would be a 1 GB answer.
func TestLeaseAnswerIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 12 MB")
	}
	srv, _ := newAPIServer(t)
	payload := `"` + strings.Repeat("x", 1_000_000) + `"`
	for i := range 12 {
		must(t, srv, 201, "POST", "/v1/groups/big/messages", fmt.Sprintf(`{"id":"m%d","payload":%s}`, i, payload))
	}
	l := must(t, srv, 200, "POST", "/v1/groups/big/lease", `{"processor":"p","max":100}`)
	if n := len(seqsOf(t, l)); n != MaxLeaseBytes/len(payload) {
		t.Fatalf("a lease took %d messages of %d bytes; want %d, what fits %d bytes", n, len(payload), MaxLeaseBytes/len(payload), MaxLeaseBytes)
	}
}

// A payload comes back as the JSON its publisher sent (compacted), in a
// lease, an output page and the SSE stream: json.Marshal turned each <, >
// and & into six bytes, so a page of them outgrew what the stream budget
// reserved for it six times over.
func TestPayloadComesBackAsSent(t *testing.T) {
	srv, _ := newAPIServer(t)
	g := "/v1/groups/html"
	payload := `{"a":"<b>&</b>","c":[1,"<>"]}`
	must(t, srv, 201, "POST", g+"/messages", `{"id":"x","payload":`+payload+`}`)
	_, lease := call(t, srv, "POST", g+"/lease", `{"processor":"p","max":1}`)
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":[1]}`)
	_, out := call(t, srv, "GET", g+"/output?after=0", "")
	for name, b := range map[string]string{"lease": lease, "output": out} {
		if !strings.Contains(b, `"payload":`+payload) {
			t.Errorf("%s: %s; want the payload as sent, %s", name, b, payload)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL+g+"/output/stream?after=0", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	for err == nil && !strings.HasPrefix(line, "data:") {
		line, err = br.ReadString('\n')
	}
	if err != nil || !strings.Contains(line, `"payload":`+payload) {
		t.Errorf("stream: %q, %v; want the payload as sent", line, err)
	}
}

// GET /v1/groups answers pages of groups by name with a cursor, each
// group once, whatever the partitions.
func TestListGroupsPages(t *testing.T) {
	srv, _ := newAPIServer(t)
	var want []string
	for i := range 7 {
		g := fmt.Sprintf("g%02d", i)
		want = append(want, g)
		must(t, srv, 201, "POST", "/v1/groups/"+g+"/messages", `{"payload":1}`)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		v := must(t, srv, 200, "GET", "/v1/groups?limit=3&after="+after, "")
		for _, g := range v["groups"].([]any) {
			got = append(got, g.(map[string]any)["name"].(string))
		}
		next, _ := v["next"].(string)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("no last page")
		}
		after = next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groups over the pages: %v, want %v", got, want)
	}
	if st, _ := call(t, srv, "GET", "/v1/groups?limit=1001", ""); st != http.StatusBadRequest {
		t.Fatalf("limit over 1000: %d", st)
	}
}

// The group lists take turns (oneOfFew): with every turn held, a list
// waits its patience and is refused with a pause, and goes through once
// a turn is free.
func TestGroupListsTakeTurns(t *testing.T) {
	srv, a := newAPIServer(t)
	a.lists = api.NewTurns(1, 20*time.Millisecond)
	a.lists.Take(context.Background())
	for _, path := range []string{"/v1/groups", "/v1/ops/groups"} {
		apitest.WantBusy(t, srv.URL+path)
	}
	a.lists.Give()
	for _, path := range []string{"/v1/groups", "/v1/ops/groups"} {
		must(t, srv, 200, "GET", path, "")
	}
}
