package server

//lint:file-ignore SA1019 h2cTransport is x/net/http2's Transport on purpose: a client other than net/http's (deprecated since x/net v0.5x, which OpenTelemetry's exporters need)

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/surge-run/surge/internal/auth"
)

// authTokens are the tokens of the route walk: one per workload and
// role, the worker's, and a global admin.
type authTokens struct {
	table  *auth.Table
	tokens map[string]string // name -> token
}

func newAuthTokens(t *testing.T) authTokens {
	t.Helper()
	at := authTokens{tokens: map[string]string{}}
	var entries []auth.Entry
	add := func(name, scope string) {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		sc, err := auth.ParseScopes(scope)
		if err != nil {
			t.Fatal(err)
		}
		at.tokens[name] = tok
		entries = append(entries, auth.Entry{Name: name, Scopes: sc, Hash: auth.Hash(tok)})
	}
	for _, w := range auth.Workloads {
		for _, r := range []string{"read", "write", "admin"} {
			add(w+"-"+r, w+":"+r)
		}
	}
	add("jobs-worker", "jobs:worker")
	add("all-admin", "*:admin")
	table, err := auth.NewTable(entries, "")
	if err != nil {
		t.Fatal(err)
	}
	at.table = table
	return at
}

// serveWithAuth starts a server with tokens on and returns it and its
// base URL.
func serveWithAuth(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	cfg.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s, "http://" + s.Addr()
}

// h2cTransport speaks HTTP/2 in clear text, as gRPC clients do.
func h2cTransport() *http2.Transport {
	return &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
}

// wildcard matches a mux pattern's wildcards.
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// walkCall is one call of the walk: a route or procedure, made concrete.
type walkCall struct {
	entry  auth.Listed
	method string
	path   string
}

func callOf(e auth.Listed) walkCall {
	if e.Procedure {
		return walkCall{entry: e, method: http.MethodPost, path: e.Pattern}
	}
	method, path, ok := strings.Cut(e.Pattern, " ")
	if !ok {
		method, path = http.MethodGet, e.Pattern
	}
	if path == "/" {
		path = "/no-such-route"
	}
	path = strings.ReplaceAll(path, "{$}", "")
	path = wildcard.ReplaceAllString(path, "x1")
	return walkCall{entry: e, method: method, path: path}
}

// outcome is how a call was answered: "401", "403", or "served".
func (c walkCall) do(t *testing.T, base, token string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var body io.Reader
	if c.entry.Procedure {
		body = strings.NewReader("\x00\x00\x00\x00\x00") // one empty message
	}
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	client := http.DefaultClient
	if c.entry.Procedure {
		req.Header.Set("Content-Type", "application/grpc")
		client = &http.Client{Transport: h2cTransport()}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if errors.Is(err, context.DeadlineExceeded) {
		return "served" // a stream or long poll holding on: the gate let it in
	}
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	if c.entry.Procedure {
		// Trailers-only answers may carry grpc-status in either place.
		status := resp.Header.Get("Grpc-Status")
		if status == "" {
			_, _ = io.Copy(io.Discard, resp.Body) // a stream let in ends at the deadline
			status = resp.Trailer.Get("Grpc-Status")
		}
		switch status {
		case "16":
			return "401"
		case "7":
			return "403"
		}
		return "served"
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, c.path)
		}
		return "401"
	case http.StatusForbidden:
		return "403"
	}
	return "served"
}

// tokensFor names the tokens that must be refused (403) and one that must
// be let through for need.
func tokensFor(n auth.Need) (wrong []string, right string) {
	switch {
	case n.Workload == "" && n.Role == auth.Any:
		return nil, "jobs-worker"
	case n.Workload == auth.AllWorkloads:
		return []string{"ticketing-admin", "jobs-worker"}, "all-admin"
	case n.Role == auth.Worker:
		return []string{"jobs-read", "jobs-write", "ticketing-admin"}, "jobs-worker"
	}
	other := "ticketing-admin"
	if n.Workload == "ticketing" {
		other = "commerce-admin"
	}
	wrong = []string{other}
	if n.Workload == "jobs" {
		wrong = append(wrong, "jobs-worker")
	}
	switch n.Role {
	case auth.Read:
		return wrong, n.Workload + "-read"
	case auth.Write:
		return append(wrong, n.Workload+"-read"), n.Workload + "-write"
	}
	return append(wrong, n.Workload+"-write"), n.Workload + "-admin"
}

// requestCounts are every route's request counts: a refused call reaches
// no handler, so it changes none.
func requestCounts(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "surge_http_requests_total{") {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

// stateOf is a read of each workload's state, which refused calls must
// not change.
func stateOf(t *testing.T, base, admin string) string {
	t.Helper()
	var out []string
	get := func(method, path, contentType, body string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out = append(out, fmt.Sprintf("%s %d %s", path, resp.StatusCode, b))
	}
	get("GET", "/api/products", "", "")
	get("GET", "/api/orders", "", "")
	get("GET", "/v1/groups", "", "")
	get("POST", "/jq.AdminService/ListQueues", "application/json", "{}")
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestEveryRouteNeedsItsScope walks every route and gRPC procedure of
// every workload, as the server's own registry lists them (a route
// cannot be registered without a scope: the registry is filled where
// routes are registered): without a token each is refused 401 /
// UNAUTHENTICATED, with a token of the wrong scope 403 /
// PERMISSION_DENIED, with the right scope it is served; the refused calls
// change nothing.
func TestEveryRouteNeedsItsScope(t *testing.T) {
	at := newAuthTokens(t)
	// Every refusal of the walk comes from this one address: the limit
	// on failed authentications (tested on its own) is lifted.
	s, base := serveWithAuth(t, Config{Pprof: true, Auth: AuthConfig{Tokens: at.table, MaxAuthFailures: 1 << 30}})
	entries := s.Routes().Each()
	perWorkload := map[string]int{}
	for _, e := range entries {
		perWorkload[e.Need.Workload]++
	}
	for _, w := range auth.Workloads {
		if perWorkload[w] == 0 {
			t.Fatalf("the registry lists no route of %s: %v", w, perWorkload)
		}
	}
	before := stateOf(t, base, at.tokens["all-admin"])
	countsBefore := requestCounts(t, base)
	var walked int
	for _, e := range entries {
		c := callOf(e)
		if e.Need.Open {
			continue
		}
		walked++
		if got := c.do(t, base, ""); got != "401" {
			t.Errorf("%s (needs %s) without a token: %s, want 401 / UNAUTHENTICATED", e.Pattern, e.Need, got)
		}
		if got := c.do(t, base, "surge_not-a-token-of-this-server-000000000"); got != "401" {
			t.Errorf("%s with an unknown token: %s, want 401 / UNAUTHENTICATED", e.Pattern, got)
		}
		wrong, _ := tokensFor(e.Need)
		for _, name := range wrong {
			if got := c.do(t, base, at.tokens[name]); got != "403" {
				t.Errorf("%s (needs %s) with %s: %s, want 403 / PERMISSION_DENIED", e.Pattern, e.Need, name, got)
			}
		}
	}
	if after := requestCounts(t, base); after != countsBefore {
		t.Errorf("refused calls reached handlers:\nbefore:\n%s\nafter:\n%s", countsBefore, after)
	}
	if after := stateOf(t, base, at.tokens["all-admin"]); after != before {
		t.Errorf("refused calls changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, e := range entries {
		c := callOf(e)
		if e.Need.Open {
			if got := c.do(t, base, ""); got != "served" {
				t.Errorf("%s (open) without a token: %s", e.Pattern, got)
			}
			continue
		}
		_, right := tokensFor(e.Need)
		for _, name := range []string{right, "all-admin"} {
			if got := c.do(t, base, at.tokens[name]); got != "served" {
				t.Errorf("%s (needs %s) with %s: %s, want served", e.Pattern, e.Need, name, got)
			}
		}
	}
	if walked < 100 {
		t.Errorf("walked %d routes and procedures needing a token; the four workloads have more", walked)
	}
	t.Logf("walked %d routes and procedures (%v)", walked, perWorkload)
}

// The roles the issue names, spelled out: a worker token may take and
// report jobs but not pause queues; a read token may GET reservations but
// not create events.
func TestNamedScopes(t *testing.T) {
	at := newAuthTokens(t)
	s, _ := serveWithAuth(t, Config{Auth: AuthConfig{Tokens: at.table}})
	rs := s.Routes()
	for _, c := range []struct {
		key   string
		token string
		ok    bool
	}{
		{"/jq.WorkerService/RegisterWorker", "jobs-worker", true},
		{"/jq.WorkerService/StreamJobs", "jobs-worker", true},
		{"/jq.WorkerService/ReportResult", "jobs-worker", true},
		{"/jq.WorkerService/RegisterWorker", "jobs-write", false},
		{"/jq.WorkerService/RegisterWorker", "jobs-admin", true},
		{"/jq.AdminService/PauseQueue", "jobs-worker", false},
		{"/jq.AdminService/PauseQueue", "jobs-write", false},
		{"/jq.AdminService/PauseQueue", "jobs-admin", true},
		{"/jq.AdminService/ListQueues", "jobs-read", true},
		{"/jq.JobService/SubmitJob", "jobs-worker", false},
		{"GET /v1/reservation/{id}", "ticketing-read", true},
		{"POST /v1/event", "ticketing-read", false},
		{"POST /v1/event", "ticketing-write", true},
		{"POST /api/admin/fault", "commerce-write", false},
		{"GET /api/admin/dlq", "commerce-write", false},
		{"DELETE /v1/groups/{group}", "sequencer-write", false},
	} {
		// A procedure is found under its service's prefix, as the router
		// matches it; an HTTP route by its pattern.
		r, found := rs.Find(c.key, c.key)
		if strings.HasPrefix(c.key, "/") {
			r, found = rs.Find(c.key[:strings.LastIndexByte(c.key, '/')+1], c.key)
		}
		if !found {
			t.Fatalf("%s has no scope", c.key)
		}
		if got := at.table.Lookup(at.tokens[c.token]).Allows(r.Need); got != c.ok {
			t.Errorf("%s with %s: allowed %v, want %v (needs %s)", c.key, c.token, got, c.ok, r.Need)
		}
	}
	if slices.ContainsFunc(rs.Each(), func(e auth.Listed) bool { return strings.HasPrefix(e.Pattern, "/debug/pprof") }) {
		t.Error("pprof routes listed without --pprof")
	}
}
