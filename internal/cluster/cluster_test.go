package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

const testPartitions = 6

type testNode struct {
	id   string
	base string
	stop context.CancelFunc
	errc chan error
}

// startNode runs a real server (server.Run) as node id of cluster name,
// with the 2 s session timeout most tests use to fail over quickly.
func startNode(t *testing.T, brokers, name, id string) *testNode {
	t.Helper()
	return startNodeSession(t, brokers, name, id, 2*time.Second)
}

// startNodeSession is startNode with the given session timeout (0: the
// default).
func startNodeSession(t *testing.T, brokers, name, id string, session time.Duration) *testNode {
	t.Helper()
	return startNodeWith(t, brokers, name, id, session, nil)
}

// startNodeWith is startNodeSession with edit applied to the node's
// configuration (if not nil) before it starts.
func startNodeWith(t *testing.T, brokers, name, id string, session time.Duration, edit func(*server.Config)) *testNode {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	n := &testNode{id: id, stop: stop, errc: make(chan error, 1)}
	level := slog.LevelWarn
	if os.Getenv("SURGE_TEST_VERBOSE") != "" {
		level = slog.LevelInfo
	}
	cfg := server.Config{
		Addr:       "127.0.0.1:0",
		Partitions: testPartitions,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test_node", id),
		Ready:      ready,
		Cluster: server.ClusterConfig{
			Kafka:          brokers,
			Cluster:        name,
			NodeID:         id,
			SessionTimeout: session,
		},
		ShutdownTimeout: 20 * time.Second,
	}
	if edit != nil {
		edit(&cfg)
	}
	go func() { n.errc <- server.Run(ctx, cfg) }()
	select {
	case addr := <-ready:
		n.base = "http://" + addr
		if cfg.TLS.Enabled() {
			n.base = "https://" + addr
		}
	case err := <-n.errc:
		stop()
		t.Fatalf("node %s: %v", id, err)
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("node %s did not start", id)
	}
	t.Cleanup(func() { n.shutdown(t) })
	return n
}

func (n *testNode) shutdown(t *testing.T) {
	if n.stop == nil {
		return
	}
	n.stop()
	n.stop = nil
	select {
	case err := <-n.errc:
		if err != nil {
			t.Errorf("node %s: server.Run: %v", n.id, err)
		}
	case <-time.After(40 * time.Second):
		t.Errorf("node %s did not stop", n.id)
	}
}

var httpc = &http.Client{Timeout: 30 * time.Second}

func do(t *testing.T, method, url string, body string, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func status(t *testing.T, n *testNode) cluster.Status {
	t.Helper()
	st, b := do(t, "GET", n.base+"/v1/cluster", "", nil)
	if st != http.StatusOK {
		t.Fatalf("node %s: GET /v1/cluster: %d %s", n.id, st, b)
	}
	var s cluster.Status
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("node %s: /v1/cluster: %v: %s", n.id, err, b)
	}
	return s
}

// waitDivided waits until the nodes together serve every partition, none
// twice, each node some, and every node's owner map agrees.
func waitDivided(t *testing.T, nodes []*testNode) map[int]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		owner := map[int]string{}
		ok := true
		var why string
		for _, n := range nodes {
			s := status(t, n)
			if len(s.Owned) == 0 {
				ok, why = false, n.id+" owns nothing"
			}
			for _, p := range s.Owned {
				if o, dup := owner[p]; dup {
					ok, why = false, fmt.Sprintf("partition %d served by %s and %s", p, o, n.id)
				}
				owner[p] = n.id
			}
		}
		if ok && len(owner) != testPartitions {
			ok, why = false, fmt.Sprintf("%d of %d partitions served", len(owner), testPartitions)
		}
		if ok {
			for _, n := range nodes {
				s := status(t, n)
				for p, o := range owner {
					if m := s.Owners[fmt.Sprint(p)]; m.NodeID != o {
						ok, why = false, fmt.Sprintf("node %s maps partition %d to %q, served by %s", n.id, p, m.NodeID, o)
					}
				}
			}
		}
		if ok {
			return owner
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions not divided among the nodes: %s", why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type reservation struct {
	ReservationID string `json:"reservationId"`
	AreaID        string `json:"areaId"`
	State         string `json:"state"`
	Seats         []struct {
		Row int `json:"row"`
		Col int `json:"col"`
	} `json:"seats"`
}

// reserve makes one reservation through nodes[first], retrying with the
// same idempotency key on the next node (as a client with a list of
// nodes does) through a failover; it returns the acknowledged
// reservation, or ok false when the area is sold out.
func reserve(t *testing.T, nodes []*testNode, first int, key, area string) (reservation, bool) {
	t.Helper()
	body := fmt.Sprintf(`{"userId":"u-%s","eventId":"concert","areaId":%q,"numOfSeats":2,"type":"RANDOM"}`, key, area)
	deadline := time.Now().Add(30 * time.Second)
	for i := first; ; i++ {
		n := nodes[i%len(nodes)]
		st, b := do(t, "POST", n.base+"/v2/reservations", body, map[string]string{"Idempotency-Key": key})
		switch st {
		case http.StatusCreated:
			var r reservation
			if err := json.Unmarshal(b, &r); err != nil {
				t.Errorf("reservation %s: %v: %s", key, err, b)
			}
			return r, true
		case http.StatusConflict:
			t.Logf("reservation %s through %s: %d %s", key, n.id, st, b)
			return reservation{}, false
		}
		if time.Now().After(deadline) {
			// Errorf: reserve runs on the goroutines of reserveMany.
			t.Errorf("reservation %s through %s: still %d after retries: %s", key, n.id, st, b)
			return reservation{}, false
		}
		t.Logf("reservation %s through %s: %d %s; retrying", key, n.id, st, b)
		time.Sleep(100 * time.Millisecond)
	}
}

// readOne checks reservation id reads back through each node as r.
func readOne(t *testing.T, nodes []*testNode, id string, r reservation) {
	t.Helper()
	for _, n := range nodes {
		var st int
		var b []byte
		for range 50 {
			if st, b = do(t, "GET", n.base+"/v2/reservations/"+id, "", nil); st != http.StatusServiceUnavailable {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if st != http.StatusOK {
			t.Errorf("reservation %s through %s: %d %s", id, n.id, st, b)
			continue
		}
		var got reservation
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("reservation %s through %s: %v: %s", id, n.id, err, b)
			continue
		}
		if got.State != "RESERVED" || !slices.Equal(got.Seats, r.Seats) {
			t.Errorf("reservation %s through %s: %+v, acknowledged %+v", id, n.id, got, r)
		}
	}
}

// readBack checks every acknowledged reservation is readable through each
// node with the seats it was given, and no seat is sold twice.
func readBack(t *testing.T, nodes []*testNode, made map[string]reservation) {
	t.Helper()
	seats := map[string]string{}
	ids := make(chan string)
	var wg sync.WaitGroup
	// A few readers at once: a rolling restart under load leaves
	// thousands of reservations to read through every node.
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				readOne(t, nodes, id, made[id])
			}
		})
	}
	for id, r := range made {
		for _, s := range r.Seats {
			k := fmt.Sprintf("%s/%d/%d", r.AreaID, s.Row, s.Col)
			if other, dup := seats[k]; dup {
				t.Errorf("seat %s sold to %s and %s", k, other, id)
			}
			seats[k] = id
		}
		ids <- id
	}
	close(ids)
	wg.Wait()
	// The areas' counts agree with the reservations (checked on one node:
	// every node asks the same owners).
	st, b := do(t, "GET", nodes[0].base+"/v2/events/concert", "", nil)
	if st != http.StatusOK {
		t.Fatalf("event through %s: %d %s", nodes[0].id, st, b)
	}
	var ev struct {
		Areas []struct {
			AreaID        string `json:"areaId"`
			ReservedSeats int    `json:"reservedSeats"`
		} `json:"areas"`
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	byArea := map[string]int{}
	for k := range seats {
		byArea[strings.SplitN(k, "/", 2)[0]]++
	}
	for _, a := range ev.Areas {
		if a.ReservedSeats != byArea[a.AreaID] {
			t.Errorf("area %s: %d seats reserved, the acknowledged reservations hold %d", a.AreaID, a.ReservedSeats, byArea[a.AreaID])
		}
	}
}

var areas = []string{"A", "B", "C", "D", "E", "F"}

// createEvent creates the event "concert": 6 areas of 4 rows of 10 seats.
func createEvent(t *testing.T, n *testNode) { createEventSized(t, n, 4, 10) }

// createEventSized creates the event "concert": 6 areas of rows × cols
// seats.
func createEventSized(t *testing.T, n *testNode, rows, cols int) {
	t.Helper()
	var def bytes.Buffer
	def.WriteString(`{"eventName":"concert","areas":[`)
	for i, ar := range areas {
		if i > 0 {
			def.WriteByte(',')
		}
		fmt.Fprintf(&def, `{"areaId":%q,"price":10,"rowCount":%d,"colCount":%d}`, ar, rows, cols)
	}
	def.WriteString(`]}`)
	if st, body := do(t, "POST", n.base+"/v1/event", def.String(), nil); st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("creating the event through %s: %d %s", n.id, st, body)
	}
}

// reserveMany sends n reservations through the given nodes at once (the
// i-th through node i mod len(nodes), its retries through the next ones),
// and records the acknowledged ones in made.
// The i-th reservation of a test goes to area i mod 6 (first counts those
// made before), so 120 fill the 6 areas' 240 seats exactly.
func reserveMany(t *testing.T, nodes []*testNode, prefix string, first, n int, made map[string]reservation) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, ok := reserve(t, nodes, i, fmt.Sprintf("%s-%d", prefix, i), areas[(first+i)%len(areas)])
			if ok {
				mu.Lock()
				made[r.ReservationID] = r
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func TestNodesShareThePartitionsAndHandThemOver(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "c")
	a := startNode(t, brokers, name, "a")
	b := startNode(t, brokers, name, "b")
	c := startNode(t, brokers, name, "c")
	all := []*testNode{a, b, c}
	owner := waitDivided(t, all)
	t.Logf("owners: %v", owner)

	createEvent(t, a)

	// The partition count is the cluster's: a node asking for another
	// one is refused before it joins, with both counts named.
	err := server.Run(context.Background(), server.Config{
		Addr: "127.0.0.1:0", Partitions: testPartitions + 2, Logger: slog.New(slog.DiscardHandler),
		Cluster: server.ClusterConfig{Kafka: brokers, Cluster: name, NodeID: "wrong"},
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(testPartitions)) || !strings.Contains(err.Error(), fmt.Sprint(testPartitions+2)) {
		t.Errorf("a node with --partitions %d joined a cluster of %d: %v", testPartitions+2, testPartitions, err)
	}

	// A query whose answer is "nothing" (a nil pointer) crosses nodes too.
	for _, n := range all {
		if st, body := do(t, "GET", n.base+"/v2/events/no-such-event", "", nil); st != http.StatusNotFound {
			t.Errorf("missing event through %s: %d %s", n.id, st, body)
		}
	}

	// The sequencer's queries cross too: a list fanned out to every
	// partition, and a group that does not exist (a nil *Info).
	for _, n := range all {
		if st, body := do(t, "GET", n.base+"/v1/groups", "", nil); st != http.StatusOK {
			t.Errorf("sequencer groups through %s: %d %s", n.id, st, body)
		}
		if st, body := do(t, "GET", n.base+"/v1/groups/no-such-group", "", nil); st != http.StatusNotFound {
			t.Errorf("missing sequencer group through %s: %d %s", n.id, st, body)
		}
	}

	made := map[string]reservation{}
	reserveMany(t, []*testNode{b, c}, "first", 0, 60, made)
	if len(made) != 60 {
		t.Fatalf("%d of 60 reservations made (240 seats free)", len(made))
	}
	readBack(t, all, made)

	// Status endpoints.
	st, hb := do(t, "GET", b.base+"/healthz", "", nil)
	if st != http.StatusOK || !strings.HasPrefix(string(hb), "ok\npartitions: ") {
		t.Errorf("/healthz: %d %q", st, hb)
	}
	_, mb := do(t, "GET", b.base+"/metrics", "", nil)
	for _, want := range []string{"surge_cluster_members 3", "surge_kafka_consumer_lag{partition=", "surge_partition_owned{", "surge_kafka_produce_seconds_count"} {
		if !bytes.Contains(mb, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// At rest every owned partition has applied its whole log.
	for _, n := range all {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, mb := do(t, "GET", n.base+"/metrics", "", nil)
			var behind []string
			for _, line := range strings.Split(string(mb), "\n") {
				if strings.HasPrefix(line, "surge_kafka_consumer_lag{") && !strings.HasSuffix(line, " 0") {
					behind = append(behind, line)
				}
			}
			if len(behind) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node %s at rest reports lag: %v", n.id, behind)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// a leaves gracefully: its partitions move to b and c, and requests
	// through every remaining node keep working.
	done := make(chan struct{})
	go func() {
		defer close(done)
		reserveMany(t, []*testNode{b, c}, "during", 60, 40, made)
	}()
	a.shutdown(t)
	<-done
	rest := []*testNode{b, c}
	waitDivided(t, rest)
	reserveMany(t, rest, "after", 100, 20, made)
	if len(made) != 120 {
		t.Errorf("%d of 120 reservations made (240 seats free)", len(made))
	}
	readBack(t, rest, made)
}
