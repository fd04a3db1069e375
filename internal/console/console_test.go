package console_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/server"
)

// TestConsoleServedSafely: /ui/ serves the page with a policy that allows
// no inline script and no other origin, without a token even when tokens
// are on (it holds no data); its scripts are served as JavaScript; it is
// off with UI false; and whoami tells a token's roles per workload.
func TestConsoleServedSafely(t *testing.T) {
	base, _ := serve(t, func(c *server.Config) { c.Auth.Tokens = tokens(t) })
	resp, body := get(t, base+"/ui/", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script type="module" src="app.js">`) {
		t.Fatalf("GET /ui/: %d\n%s", resp.StatusCode, body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "connect-src 'self'", "default-src 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy %q allows inline script or eval", csp)
	}
	if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options %q", got)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " style=") || strings.Contains(body, " onclick=") {
		t.Errorf("the page has inline script or style:\n%s", body)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := noRedirect.Get(base + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode/100 != 3 || r.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui with tokens on: %d to %q, want a redirect to /ui/", r.StatusCode, r.Header.Get("Location"))
	}
	js, _ := get(t, base+"/ui/app.js", "")
	if ct := js.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("app.js served as %q", ct)
	}
	if r, _ := get(t, base+"/ui/nope.js", ""); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d", r.StatusCode)
	}

	if r, _ := get(t, base+"/v1/auth/whoami", ""); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("whoami without a token: %d, want 401", r.StatusCode)
	}
	var me struct {
		Auth   bool
		Name   string
		Scopes []string
		Roles  map[string]string
	}
	call(t, "GET", base+"/v1/auth/whoami", readToken, nil, http.StatusOK, &me)
	if !me.Auth || me.Name != "viewer" || me.Roles["jobs"] != "read" || me.Roles["commerce"] != "read" || len(me.Scopes) != 1 || me.Scopes[0] != "*:read" {
		t.Errorf("whoami of the reader: %+v", me)
	}
	call(t, "GET", base+"/v1/auth/whoami", adminToken, nil, http.StatusOK, &me)
	if me.Name != "ops" || me.Roles["sequencer"] != "admin" {
		t.Errorf("whoami of the admin: %+v", me)
	}

	off, _ := serve(t, func(c *server.Config) { c.UI = false })
	if r, _ := get(t, off+"/ui/", ""); r.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/ with the console off: %d, want 404", r.StatusCode)
	}
	call(t, "GET", off+"/v1/auth/whoami", "", nil, http.StatusOK, &me)
	if me.Auth || me.Roles["ticketing"] != "admin" {
		t.Errorf("whoami without authentication: %+v", me)
	}
}

func get(t *testing.T, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
