package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/module"
)

// freshConns opens a connection per request: a refusal may close its
// connection, and a kept one would fail the next request.
var freshConns = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func getWith(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := freshConns.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A route a module registers past the scoped registration (straight on
// the mux) has no scope, and the gate refuses it to every token; routes
// registered the normal way get the module's workload as their scope.
func TestRouteWithoutScopeIsRefused(t *testing.T) {
	at := newAuthTokens(t)
	raw := counterModule
	open := raw.Open
	raw.Open = func(env module.Env) (module.Parts, error) {
		parts, err := open(env)
		serve := parts.Serve
		parts.Serve = func(h module.Host) (module.Served, error) {
			h.Mux.HandleFunc("GET /v1/raw", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
			return serve(h)
		}
		return parts, err
	}
	_, base := serveWithAuth(t, Config{Modules: append(Builtin(), raw), Auth: AuthConfig{Tokens: at.table}})
	if code, body := getWith(t, base+"/v1/raw", at.tokens["all-admin"]); code != http.StatusForbidden || !strings.Contains(body, "no scope") {
		t.Errorf("an unscoped route with an admin token: %d %s, want 403", code, body)
	}
	if code, _ := getWith(t, base+"/v1/counters/a", at.tokens["all-admin"]); code != http.StatusOK {
		t.Errorf("a scoped route of the new module, *:admin: %d", code)
	}
	if code, _ := getWith(t, base+"/v1/counters/a", at.tokens["ticketing-admin"]); code != http.StatusForbidden {
		t.Errorf("the new module's route with another workload's token: %d", code)
	}
}

// A module's Roles naming a route it does not serve stops the server: the
// typo would leave an admin route at its method's role.
func TestRolesTypoStopsStart(t *testing.T) {
	typo := counterModule
	typo.Roles = map[string]auth.Role{"DELETE /v1/counter/{key}": auth.Admin}
	cfg := Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Modules: append(Builtin(), typo), Logger: quietLog}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err == nil {
		s.Shutdown()
		t.Fatal("New accepted a role for a route nobody serves")
	}
	if !strings.Contains(err.Error(), `DELETE /v1/counter/{key}`) {
		t.Errorf("error %v does not name the route", err)
	}
}

// --metrics-access: open serves the metrics to anyone, token to any valid
// token, off to nobody; with auth on, pprof needs a *:admin token and
// the health check none.
func TestMetricsAccessAndPprof(t *testing.T) {
	at := newAuthTokens(t)
	for _, c := range []struct {
		access      string
		none, token int
	}{
		{MetricsOpen, 200, 200},
		{MetricsToken, 401, 200},
		// Off, they are unknown routes, which need a token like any.
		{MetricsOff, 401, 404},
	} {
		_, base := serveWithAuth(t, Config{Pprof: true, Auth: AuthConfig{Tokens: at.table, MetricsAccess: c.access}})
		for _, path := range []string{"/metrics", "/actuator/prometheus"} {
			if code, _ := getWith(t, base+path, ""); code != c.none {
				t.Errorf("--metrics-access %s: %s without a token: %d, want %d", c.access, path, code, c.none)
			}
			if code, _ := getWith(t, base+path, at.tokens["jobs-worker"]); code != c.token {
				t.Errorf("--metrics-access %s: %s with a token: %d, want %d", c.access, path, code, c.token)
			}
		}
		if code, _ := getWith(t, base+"/healthz", ""); code != 200 {
			t.Errorf("/healthz without a token: %d", code)
		}
		if code, _ := getWith(t, base+"/debug/pprof/", at.tokens["jobs-admin"]); code != http.StatusForbidden {
			t.Errorf("pprof with jobs:admin: %d, want 403", code)
		}
		if code, _ := getWith(t, base+"/debug/pprof/", at.tokens["all-admin"]); code != http.StatusOK {
			t.Errorf("pprof with *:admin: %d, want 200", code)
		}
	}
}

// A token's worker streams beyond --max-streams-per-token are refused
// RESOURCE_EXHAUSTED naming the flag, before they take a place.
func TestStreamsPerTokenOverGRPC(t *testing.T) {
	at := newAuthTokens(t)
	_, base := serveWithAuth(t, Config{Auth: AuthConfig{Tokens: at.table, MaxOpenPerToken: 1}})
	client := &http.Client{Transport: h2cTransport()}
	stream := func(ctx context.Context) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/surge.sequencer.v1.SequencerService/Read", strings.NewReader("\x00\x00\x00\x00\x04\x0a\x02g1"))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Authorization", "Bearer "+at.tokens["sequencer-read"])
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := stream(ctx)
	defer first.Body.Close()
	if s := first.Header.Get("Grpc-Status"); s != "" {
		t.Fatalf("the first stream ended at once: grpc-status %s %s", s, first.Header.Get("Grpc-Message"))
	}
	second := stream(context.Background())
	_, _ = io.Copy(io.Discard, second.Body)
	second.Body.Close()
	status := second.Header.Get("Grpc-Status") + second.Trailer.Get("Grpc-Status")
	msg := second.Header.Get("Grpc-Message") + second.Trailer.Get("Grpc-Message")
	if status != "8" || !strings.Contains(msg, "max-streams-per-token") {
		t.Errorf("a second stream of the token: grpc-status %q %q, want 8 (RESOURCE_EXHAUSTED) naming the limit", status, msg)
	}
}

// Refusals come before admission: with the one in-flight slot taken, a
// valid call waits in the waiting room, while a call without a token or
// with the wrong scope is answered at once.
func TestRefusalTakesNoSlot(t *testing.T) {
	at := newAuthTokens(t)
	_, base := serveWithAuth(t, Config{MaxInflight: 1, Auth: AuthConfig{Tokens: at.table}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/groups/g1/lease", strings.NewReader(`{"processor":"p","waitMs":60000}`))
	req.Header.Set("Authorization", "Bearer "+at.tokens["sequencer-write"])
	held := make(chan struct{})
	go func() {
		defer close(held)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	impatient := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe, _ := http.NewRequest("GET", base+"/api/products", nil)
		probe.Header.Set("Authorization", "Bearer "+at.tokens["commerce-read"])
		resp, err := impatient.Do(probe)
		if err != nil {
			break // waiting in the room: the long poll holds the slot
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the long poll never held the slot: %s", resp.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := getWith(t, base+"/api/products", ""); code != http.StatusUnauthorized {
		t.Errorf("no token with the slot taken: %d %s, want 401", code, body)
	}
	if code, body := getWith(t, base+"/api/products", at.tokens["ticketing-read"]); code != http.StatusForbidden {
		t.Errorf("a wrong scope with the slot taken: %d %s, want 403", code, body)
	}
	cancel()
	<-held
}

// Connect clients (JSON over HTTP/1.1) get their protocol's errors: HTTP
// 401 / 403 with the codes unauthenticated / permission_denied.
func TestConnectRefusals(t *testing.T) {
	at := newAuthTokens(t)
	_, base := serveWithAuth(t, Config{Auth: AuthConfig{Tokens: at.table}})
	for _, c := range []struct {
		token, code string
		status      int
	}{
		{"", `"code":"unauthenticated"`, http.StatusUnauthorized},
		{"jobs-worker", `"code":"permission_denied"`, http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", base+"/jq.JobService/SubmitJob", strings.NewReader(`{"queueName":"default"}`))
		req.Header.Set("Content-Type", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+at.tokens[c.token])
		}
		resp, err := freshConns.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.code) {
			t.Errorf("SubmitJob with %q: %d %s, want %d %s", c.token, resp.StatusCode, b, c.status, c.code)
		}
	}
}
