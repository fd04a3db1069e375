package cluster_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/kafkalog"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
)

var clusterSecret = []byte("the-secure-cluster-test-secret-32b")

// syncBuffer is a log every goroutine of a node may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secured sets a node to reach Kafka over SASL_SSL with mechanism mech,
// with the given cluster secret, logging into logs.
func secured(sec kafkatest.Secure, mech string, secret []byte, logs *syncBuffer) func(*server.Config) {
	return func(cfg *server.Config) {
		cfg.Cluster.Kafka = sec.Brokers
		cfg.Cluster.KafkaSecurity = kafkalog.Security{TLS: true, CAFile: sec.CAFile, SASL: mech, User: sec.User, Password: sec.Password}
		cfg.Cluster.Secret = secret
		cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
}

// recorder stands between the other nodes and node a (a advertises its
// address): it passes calls on and keeps a copy of each, to replay.
type recorder struct {
	mu     sync.Mutex
	target *url.URL
	calls  []*http.Request
	bodies [][]byte
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	target := rc.target
	rc.mu.Unlock()
	if target == nil {
		http.Error(w, "not serving yet", http.StatusServiceUnavailable)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == cluster.CallPath && r.Header.Get(cluster.HeaderProbe) == "" {
		rc.mu.Lock()
		rc.calls = append(rc.calls, r.Clone(context.Background()))
		rc.bodies = append(rc.bodies, body)
		rc.mu.Unlock()
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
}

// replay sends a recorded call again, headers edited by edit, straight to
// node a.
func (rc *recorder) replay(t *testing.T, i int, edit func(http.Header)) (int, string) {
	t.Helper()
	rc.mu.Lock()
	orig, body, target := rc.calls[i], rc.bodies[i], rc.target
	rc.mu.Unlock()
	req, err := http.NewRequest(http.MethodPost, target.String()+cluster.CallPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = orig.Header.Clone()
	if edit != nil {
		edit(req.Header)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("replaying a call: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Three nodes reach Kafka through its SASL_SSL listener (each with a
// different mechanism) and sign their calls: they serve a workload. A node
// with a wrong Kafka password, a wrong cluster secret or none is refused
// and says why; the members name the one with the wrong secret. Recorded
// calls replayed or forged are refused and change nothing.
func TestSecureCluster(t *testing.T) {
	sec := kafkatest.SecureBrokers(t)
	name := kafkatest.Topic(t, "sc")
	var logs syncBuffer
	rec := &recorder{}
	front := httptest.NewServer(rec)
	defer front.Close()
	a := startNodeWith(t, "", name, "a", 2*time.Second, func(cfg *server.Config) {
		secured(sec, kafkalog.SASLScramSHA256, clusterSecret, &logs)(cfg)
		cfg.Cluster.Advertise = strings.TrimPrefix(front.URL, "http://")
	})
	rec.mu.Lock()
	rec.target, _ = url.Parse(a.base)
	rec.mu.Unlock()
	b := startNodeWith(t, "", name, "b", 2*time.Second, secured(sec, kafkalog.SASLScramSHA512, clusterSecret, &logs))
	c := startNodeWith(t, "", name, "c", 2*time.Second, secured(sec, kafkalog.SASLPlain, clusterSecret, &logs))
	all := []*testNode{a, b, c}
	waitDivided(t, all)
	createEvent(t, a)
	made := map[string]reservation{}
	reserveMany(t, []*testNode{b, c}, "secure", 0, 60, made)
	if len(made) != 60 {
		t.Fatalf("%d of 60 reservations made (240 seats free)", len(made))
	}
	readBack(t, all, made)

	refused := func(why string, edit func(*server.Config), want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cfg := server.Config{Addr: "127.0.0.1:0", Partitions: testPartitions, ShutdownTimeout: 5 * time.Second,
			Cluster: server.ClusterConfig{Cluster: name, NodeID: "wrong"}}
		edit(&cfg)
		err := server.Run(ctx, cfg)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a node with %s: %v, want an error saying %q", why, err, want)
		}
		t.Logf("a node with %s: %v", why, err)
	}
	var wrongLogs syncBuffer
	badPassword := sec
	badPassword.Password += "x"
	refused("a wrong Kafka password", secured(badPassword, kafkalog.SASLScramSHA256, clusterSecret, &wrongLogs), "SURGE_KAFKA_PASSWORD")
	refused("a wrong cluster secret", secured(sec, kafkalog.SASLScramSHA256, []byte("not-the-cluster-secret-at-all"), &wrongLogs), "refused this node's cluster secret")
	refused("no cluster secret", secured(sec, kafkalog.SASLScramSHA256, nil, &wrongLogs), "this node has none")
	if !strings.Contains(logs.String(), "refused a call from another node") || !strings.Contains(logs.String(), `wrong/127.0.0.1:`) {
		t.Errorf("the members did not log the refused node by its claimed id and address:\n%s", logs.String())
	}
	waitDivided(t, all)

	// Replays and forgeries of calls b and c sent to a: refused, and
	// nothing changes.
	rec.mu.Lock()
	n := len(rec.calls)
	rec.mu.Unlock()
	if n == 0 {
		t.Fatal("no call to node a was recorded")
	}
	_, before := do(t, "GET", b.base+"/v2/events/concert", "", nil)
	forged := map[string]func(http.Header){
		"replayed":       nil,
		"unsigned":       func(h http.Header) { h.Del(cluster.HeaderAuth) },
		"other node":     func(h http.Header) { h.Set(cluster.HeaderNode, "mallory/127.0.0.1:1") },
		"signature lost": func(h http.Header) { h.Set(cluster.HeaderAuth, h.Get(cluster.HeaderAuth)[:40]) },
	}
	for i := range min(n, 20) {
		for what, edit := range forged {
			if st, msg := rec.replay(t, i, edit); st != http.StatusUnauthorized {
				t.Errorf("call %d %s: %d %s, want 401", i, what, st, msg)
			}
		}
	}
	if _, after := do(t, "GET", b.base+"/v2/events/concert", "", nil); !bytes.Equal(before, after) {
		t.Errorf("refused calls changed the event:\nbefore %s\nafter  %s", before, after)
	}
	readBack(t, all, made)
}
