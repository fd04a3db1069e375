package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
)

var (
	testSecret  = []byte("0123456789abcdef-the-right-one")
	otherSecret = []byte("0123456789abcdef-the-wrong-one")
)

// securedNode is testNode with a cluster secret and its log in buf. Its
// handler has no engine: a call that reached it would panic the test.
func securedNode(secret []byte, buf *bytes.Buffer) *Node {
	n := testNode()
	n.cfg.Secret = secret
	if len(secret) > 0 {
		n.verify = newVerifier(secret)
	}
	if buf != nil {
		n.log = slog.New(slog.NewTextHandler(buf, nil))
	}
	return n
}

// signedCall is a call as transport.post makes it, signed with key at now.
func signedCall(t testing.TB, key []byte, cluster string, body []byte, now time.Time) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, CallPath, bytes.NewReader(body))
	r.Header.Set(HeaderCluster, cluster)
	if _, err := sign(r, key, cluster, "caller/127.0.0.1:9", body, now); err != nil {
		t.Fatal(err)
	}
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A node with a secret refuses, before its engine, every call not signed
// with that secret for this very call, now, once.
func TestCallHandlerRefusesUnsignedForgedStaleReplayed(t *testing.T) {
	var logs bytes.Buffer
	n := securedNode(testSecret, &logs)
	h := n.Handler(nil)
	now := time.Now()
	body := []byte("apply this")
	tamper := func(f func(r *http.Request)) *http.Request {
		r := signedCall(t, testSecret, "blue", body, now)
		f(r)
		return r
	}
	cases := map[string]*http.Request{
		"unsigned":       httptest.NewRequest(http.MethodPost, CallPath, bytes.NewReader(body)),
		"wrong secret":   signedCall(t, otherSecret, "blue", body, now),
		"too old":        signedCall(t, testSecret, "blue", body, now.Add(-MaxClockSkew-time.Second)),
		"too new":        signedCall(t, testSecret, "blue", body, now.Add(MaxClockSkew+time.Second)),
		"garbled":        tamper(func(r *http.Request) { r.Header.Set(HeaderAuth, "v1 t=1,n=zz") }),
		"other node":     tamper(func(r *http.Request) { r.Header.Set(HeaderNode, "mallory/127.0.0.1:6") }),
		"made a probe":   tamper(func(r *http.Request) { r.Header.Set(HeaderProbe, "1") }),
		"other cluster":  tamper(func(r *http.Request) { r.Header.Set(HeaderCluster, "green") }),
		"other path":     tamper(func(r *http.Request) { r.URL.Path = CallPath + "/x" }),
		"body swapped":   tamper(func(r *http.Request) { r.Body = httptestBody("apply that") }),
		"body truncated": tamper(func(r *http.Request) { r.Body = httptestBody("apply") }),
	}
	for name, r := range cases {
		if w := serve(h, r); w.Code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", name, w.Code, w.Body)
		}
	}
	if !strings.Contains(logs.String(), "refused a call from another node") || !strings.Contains(logs.String(), "claimed_node") {
		t.Errorf("the refusal is not logged with the caller's claimed id:\n%s", logs.String())
	}

	// The same signed probe twice: the second is a replay.
	probe := signedProbe(t, testSecret, now)
	replay := probe.Clone(context.Background())
	if w := serve(h, probe); w.Code != http.StatusNoContent {
		t.Fatalf("a signed probe: %d %s", w.Code, w.Body)
	}
	if w := serve(h, replay); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "replayed") {
		t.Errorf("a replayed probe: %d %s, want 401 naming the replay", w.Code, w.Body)
	}
}

func httptestBody(s string) *readCloser { return &readCloser{strings.NewReader(s)} }

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

func signedProbe(t testing.TB, key []byte, now time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodPost, CallPath, http.NoBody)
	r.Header.Set(HeaderCluster, "blue")
	r.Header.Set(HeaderProbe, "1")
	if _, err := sign(r, key, "blue", "caller/127.0.0.1:9", nil, now); err != nil {
		t.Fatal(err)
	}
	return r
}

// Only a refused refusal is logged per refusedLogEvery: a flood of forged
// calls writes one line and a count.
func TestRefusedCallsLogRateLimited(t *testing.T) {
	var logs bytes.Buffer
	h := securedNode(testSecret, &logs).Handler(nil)
	for range 100 {
		serve(h, signedCall(t, otherSecret, "blue", nil, time.Now()))
	}
	if got := strings.Count(logs.String(), "refused a call"); got != 1 {
		t.Errorf("%d log lines for 100 refused calls, want 1:\n%s", got, logs.String())
	}
}

// A correctly signed call passes the check; nonces are kept for two
// generations of 2×MaxClockSkew and bounded by the limit.
func TestVerifierNonces(t *testing.T) {
	v := newVerifier(testSecret)
	clock := time.Now()
	v.now = func() time.Time { return clock }
	r := signedCall(t, testSecret, "blue", []byte("b"), clock)
	h, err := v.check(r, "blue")
	if err != nil {
		t.Fatalf("a good call refused: %v", err)
	}
	clock = clock.Add(2 * MaxClockSkew)
	if err := v.remember(h.nonce, clock); err == nil {
		t.Error("a nonce was forgotten after one generation")
	}
	clock = clock.Add(2 * MaxClockSkew)
	if err := v.remember(h.nonce, clock); err != nil {
		t.Errorf("a nonce two generations old is still remembered: %v", err)
	}
	full := newVerifier(testSecret)
	for i := range MaxNonces {
		var n [nonceBytes]byte
		n[0], n[1], n[2] = byte(i), byte(i>>8), byte(i>>16)
		if err := full.remember(n, clock); err != nil {
			t.Fatalf("nonce %d refused: %v", i, err)
		}
	}
	var last [nonceBytes]byte
	last[5] = 1
	var ref *refusal
	if err := full.remember(last, clock); !errors.As(err, &ref) || ref.status != http.StatusServiceUnavailable || !strings.Contains(ref.reason, "MaxNonces") {
		t.Errorf("past MaxNonces: %v, want 503 naming the limit", err)
	}
}

// A node whose secret differs cannot forward: its call is refused, and
// the transport reports ErrNotOwner (nothing was done) saying why.
func TestWrongSecretCannotForward(t *testing.T) {
	var logs bytes.Buffer
	owner := securedNode(testSecret, &logs)
	srv := httptest.NewServer(owner.Handler(nil))
	defer srv.Close()
	for _, secret := range [][]byte{otherSecret, nil} {
		caller := securedNode(secret, nil)
		caller.owners.setLocal(0, "owner", strings.TrimPrefix(srv.URL, "http://"))
		_, err := caller.transport.Call(context.Background(), 0, []byte("x"))
		if !errors.Is(err, engine.ErrNotOwner) || !strings.Contains(err.Error(), "401") {
			t.Errorf("secret %q: %v, want ErrNotOwner with the 401", secret, err)
		}
	}
	if !strings.Contains(logs.String(), "claimed_node=self/127.0.0.1:1") {
		t.Errorf("the owner did not name the refused node:\n%s", logs.String())
	}
}

// Join's probe tells a node whether each member shares its secret.
func TestProbe(t *testing.T) {
	peer := func(secret []byte) Member {
		srv := httptest.NewServer(securedNode(secret, nil).Handler(nil))
		t.Cleanup(srv.Close)
		return Member{NodeID: "peer", Addr: strings.TrimPrefix(srv.URL, "http://")}
	}
	for _, c := range []struct {
		name         string
		self, remote []byte
		want         string
	}{
		{"same secret", testSecret, testSecret, ""},
		{"no secrets", nil, nil, ""},
		{"wrong secret", otherSecret, testSecret, "refused this node's cluster secret"},
		{"none here", nil, testSecret, "this node has none"},
		{"none there", testSecret, nil, "runs with none"},
	} {
		err := securedNode(c.self, nil).probe(context.Background(), peer(c.remote))
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestCheckSecret(t *testing.T) {
	if err := CheckSecret([]byte("short")); err == nil || !strings.Contains(err.Error(), "MinSecretBytes") {
		t.Errorf("a 5-byte secret: %v", err)
	}
	if CheckSecret(nil) != nil || CheckSecret(testSecret) != nil {
		t.Error("no secret or a long one refused")
	}
	if err := (&Config{Log: kafkalog.Config{Brokers: []string{"x"}, Cluster: "c", NodeID: "n"}, Advertise: "a:1", Secret: []byte("x")}).fillDefaults(); err == nil {
		t.Error("a node accepted a 1-byte secret")
	}
}

// The header parser never panics, and what it accepts prints back to
// itself.
func FuzzParseAuthHeader(f *testing.F) {
	h := authHeader{ts: time.Now().UnixMilli()}
	h.mac[0] = 7
	for _, s := range []string{h.String(), "", "v1 ", "v1 t=1,n=00,b=00,m=00", "v1 t=-1,n=,b=,m=", "v2 " + h.String()[3:]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseAuthHeader(s)
		if err != nil {
			return
		}
		again, err := parseAuthHeader(got.String())
		if err != nil || again != got {
			t.Fatalf("%q parsed as %+v, which prints as %q and parses as %+v, %v", s, got, got.String(), again, err)
		}
	})
}

// Forged calls (any header, body, cluster, node, time) and replays of a
// signed one never reach the engine (there is none: it would panic) and
// are answered 401.
func FuzzForgedCalls(f *testing.F) {
	n := securedNode(testSecret, nil)
	h := n.Handler(nil)
	// A correctly signed call whose nonce (fixed: fuzzing runs this in
	// several processes) counts as seen already: every copy is a replay.
	good := authHeader{ts: time.Now().UnixMilli(), nonce: [nonceBytes]byte{1, 2, 3}, body: sha256.Sum256([]byte("body"))}
	good.mac = callMAC(testSecret, http.MethodPost, CallPath, "blue", "caller/127.0.0.1:9", "", &good)
	if err := n.verify.remember(good.nonce, time.Now()); err != nil {
		f.Fatal(err)
	}
	serve(h, signedProbe(f, testSecret, time.Now()))
	f.Add(good.String(), "blue", "caller/127.0.0.1:9", []byte("body"), false)
	f.Add(good.String(), "blue", "caller/127.0.0.1:9", []byte("other"), true)
	f.Add("", "", "", []byte{}, false)
	f.Fuzz(func(t *testing.T, auth, cluster, node string, body []byte, probe bool) {
		r := httptest.NewRequest(http.MethodPost, CallPath, bytes.NewReader(body))
		r.Header.Set(HeaderAuth, auth)
		r.Header.Set(HeaderCluster, cluster)
		r.Header.Set(HeaderNode, node)
		if probe {
			r.Header.Set(HeaderProbe, "1")
		}
		w := serve(h, r)
		if w.Code != http.StatusUnauthorized && !(probe && w.Code == http.StatusNoContent) {
			t.Fatalf("a forged call answered %d: %s", w.Code, w.Body)
		}
	})
}

// With CallTLS, calls go over https to a node whose listener serves TLS.
func TestCallsOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(securedNode(testSecret, nil).Handler(nil))
	defer srv.Close()
	n := securedNode(testSecret, nil)
	n.cfg.CallTLS = srv.Client().Transport.(*http.Transport).TLSClientConfig
	n.transport = newTransport(n)
	peer := Member{NodeID: "peer", Addr: strings.TrimPrefix(srv.URL, "https://")}
	if err := n.probe(context.Background(), peer); err != nil {
		t.Errorf("a probe over TLS: %v", err)
	}
}
