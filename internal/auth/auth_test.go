package auth

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestScopeGrants(t *testing.T) {
	for _, c := range []struct {
		scope string
		need  Need
		ok    bool
	}{
		{"ticketing:read", Need{Workload: "ticketing", Role: Read}, true},
		{"ticketing:read", Need{Workload: "ticketing", Role: Write}, false},
		{"ticketing:admin", Need{Workload: "ticketing", Role: Write}, true},
		{"ticketing:admin", Need{Workload: "commerce", Role: Read}, false},
		{"*:write", Need{Workload: "commerce", Role: Write}, true},
		{"*:write", Need{Workload: "commerce", Role: Admin}, false},
		{"jobs:worker", Need{Workload: "jobs", Role: Worker}, true},
		{"jobs:worker", Need{Workload: "jobs", Role: Read}, false},
		{"jobs:write", Need{Workload: "jobs", Role: Worker}, false},
		{"jobs:admin", Need{Workload: "jobs", Role: Worker}, true},
		{"jobs:worker", Need{Role: Any}, true},
		{"jobs:admin", Need{Workload: AllWorkloads, Role: Admin}, false},
		{"*:admin", Need{Workload: AllWorkloads, Role: Admin}, true},
	} {
		sc, err := ParseScope(c.scope)
		if err != nil {
			t.Fatal(err)
		}
		p := &Principal{Scopes: []Scope{sc}}
		if got := p.Allows(c.need); got != c.ok {
			t.Errorf("%s for %s: %v, want %v", c.scope, c.need, got, c.ok)
		}
	}
	for _, bad := range []string{"", "ticketing", "shop:read", "ticketing:root", "commerce:worker", "*:worker", "ticketing:read:x"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

func TestParseFile(t *testing.T) {
	tok, _ := NewToken()
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Fatalf("NewToken() = %q", tok)
	}
	e := Entry{Name: "ci", Scopes: []Scope{{"ticketing", Read}, {"jobs", Worker}}, Hash: Hash(tok)}
	file := "# tokens\n\n" + e.Line() + "  # the CI's\n"
	got, err := ParseFile(strings.NewReader(file))
	if err != nil || len(got) != 1 || got[0].Line() != e.Line() {
		t.Fatalf("ParseFile = %v, %v; want %v", got, err, e)
	}
	table, err := NewTable(got, "")
	if err != nil {
		t.Fatal(err)
	}
	if p := table.Lookup(tok); p == nil || p.Name != "ci" {
		t.Errorf("Lookup(token) = %v", p)
	}
	for _, bad := range []string{"x", tok, "" + tok[:10], tok + "x"} {
		if p := table.Lookup(bad); p != nil && bad != tok {
			t.Errorf("Lookup(%q) = %v", bad, p.Name)
		}
	}
	for _, c := range []struct{ file, want string }{
		{"a ticketing:read sha256:00\n", "line 1: the hash"},
		{"a ticketing:read\n", "line 1: want"},
		{"\n" + e.Line() + "\n" + e.Line() + "\n", "line 3: name \"ci\" is used twice"},
		{e.Line() + "\n" + strings.Replace(e.Line(), "ci", "cd", 1) + "\n", "line 2: this hash"},
		{"a/b ticketing:read sha256:" + strings.Repeat("0", 64), "line 1: name"},
		{"a shop:read sha256:" + strings.Repeat("0", 64), "line 1: scope"},
	} {
		if _, err := ParseFile(strings.NewReader(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseFile(%q) = %v, want %q", c.file, err, c.want)
		}
	}
	big := strings.Repeat("# padding\n", MaxTokensFileBytes/10+1)
	if _, err := ParseFile(strings.NewReader(big)); err == nil {
		t.Error("ParseFile read a file past MaxTokensFileBytes")
	}
	if _, err := NewTable(nil, "short"); err == nil {
		t.Error("NewTable took a short bootstrap token")
	}
	if _, err := NewTable(got, tok); err == nil {
		t.Error("NewTable took the bootstrap token twice")
	}
}

// FuzzParseFile: any input is refused with an error or gives entries that
// write back to lines that parse to the same entries.
func FuzzParseFile(f *testing.F) {
	f.Add("ci ticketing:read,jobs:worker sha256:" + strings.Repeat("ab", 32) + " # x\n")
	f.Add("# only a comment\n\n")
	f.Add("a *:admin sha256:" + strings.Repeat("0", 64))
	f.Add("a b c d\n")
	f.Fuzz(func(t *testing.T, in string) {
		entries, err := ParseFile(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		for _, e := range entries {
			b.WriteString(e.Line() + "\n")
		}
		again, err := ParseFile(&b)
		if err != nil || len(again) != len(entries) {
			t.Fatalf("the lines written back do not parse: %v\n%s", err, b.String())
		}
		for i := range again {
			if again[i].Line() != entries[i].Line() {
				t.Fatalf("%q != %q", again[i].Line(), entries[i].Line())
			}
		}
	})
}

func TestFailuresBlockPastTheLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	f := NewFailures(3, time.Minute)
	f.now = func() time.Time { return now }
	for range 3 {
		f.Fail("10.0.0.1")
	}
	if _, blocked := f.Blocked("10.0.0.1"); blocked {
		t.Fatal("blocked at the limit")
	}
	f.Fail("10.0.0.1")
	if retry, blocked := f.Blocked("10.0.0.1"); !blocked || retry != time.Minute {
		t.Fatalf("past the limit: %v, %v", retry, blocked)
	}
	if _, blocked := f.Blocked("10.0.0.2"); blocked {
		t.Fatal("another address blocked")
	}
	now = now.Add(time.Minute)
	if _, blocked := f.Blocked("10.0.0.1"); blocked {
		t.Fatal("still blocked once the window ended")
	}
	if f.blocked.Load() != 0 || len(f.byAddr) != 0 {
		t.Errorf("an ended window is kept: %d blocked, %d tracked", f.blocked.Load(), len(f.byAddr))
	}
}

// testGate serves one route of each kind behind a gate.
func testGate(t *testing.T, table *Table, failures *Failures, maxOpen int) (http.Handler, chan struct{}) {
	t.Helper()
	rs := NewRoutes()
	mustAdd := func(p string, r Route) {
		if err := rs.Add(p, r); err != nil {
			t.Fatal(err)
		}
	}
	mustAdd("GET /healthz", Route{Need: Need{Open: true}})
	mustAdd("GET /v1/x", Route{Need: Need{Workload: "ticketing", Role: Read}})
	mustAdd("GET /v1/wait", Route{Need: Need{Workload: "ticketing", Role: Read}, LongLived: true})
	mux := http.NewServeMux()
	release := make(chan struct{})
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /v1/x", ok)
	mux.HandleFunc("GET /v1/wait", func(w http.ResponseWriter, r *http.Request) { <-release })
	mux.HandleFunc("GET /v1/unscoped", ok)
	g := NewGate(GateConfig{Table: table, Routes: rs, Failures: failures, MaxOpen: maxOpen,
		Route: func(_ http.ResponseWriter, r *http.Request) string { _, p := mux.Handler(r); return p }})
	return g.Wrap(mux), release
}

func call(h http.Handler, path, addr, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = addr
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestGate(t *testing.T) {
	read, _ := NewToken()
	other, _ := NewToken()
	admin, _ := NewToken()
	table, _ := NewTable([]Entry{
		{Name: "reader", Scopes: []Scope{{"ticketing", Read}}, Hash: Hash(read)},
		{Name: "other", Scopes: []Scope{{"commerce", Admin}}, Hash: Hash(other)},
	}, admin)
	h, _ := testGate(t, table, nil, 0)
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", 200},
		{"/v1/x", "", 401},
		{"/v1/x", "nope", 401},
		{"/v1/x", other, 403},
		{"/v1/x", read, 200},
		{"/v1/x", admin, 200},
		{"/v1/unscoped", admin, 403},
	} {
		w := call(h, c.path, "127.0.0.1:5000", c.token)
		if w.Code != c.want {
			t.Errorf("%s with %q: %d %s, want %d", c.path, c.token, w.Code, w.Body, c.want)
		}
		if w.Code >= 400 && !strings.HasPrefix(w.Body.String(), `{"error":`) {
			t.Errorf("%s: body %q is not a JSON error", c.path, w.Body)
		}
		if w.Code == 401 && !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer")
		}
		if strings.Contains(w.Body.String(), read) || strings.Contains(w.Body.String(), other) {
			t.Errorf("a token is in the answer: %s", w.Body)
		}
	}
	if w := call(h, "/v1/x", "127.0.0.1:5000", other); !strings.Contains(w.Body.String(), `token \"other\" lacks`) {
		t.Errorf("403 does not name the token: %s", w.Body)
	}
}

// Past the limit an address is refused 429 with Retry-After before its
// token is hashed, even a valid one; other addresses are not.
func TestGateLimitsFailuresPerAddress(t *testing.T) {
	read, _ := NewToken()
	table, _ := NewTable([]Entry{{Name: "reader", Scopes: []Scope{{"ticketing", Read}}, Hash: Hash(read)}}, "")
	h, _ := testGate(t, table, NewFailures(2, time.Minute), 0)
	for range 3 {
		if w := call(h, "/v1/x", "192.0.2.7:1234", "guess"); w.Code != 401 {
			t.Fatalf("a wrong token: %d", w.Code)
		}
	}
	w := call(h, "/v1/x", "192.0.2.7:999", read)
	if w.Code != 429 || w.Header().Get("Retry-After") != "60" || !strings.Contains(w.Body.String(), "--max-auth-failures") {
		t.Errorf("past the limit: %d Retry-After %q %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if w := call(h, "/healthz", "192.0.2.7:999", ""); w.Code != 200 {
		t.Errorf("an open route from a blocked address: %d", w.Code)
	}
	if w := call(h, "/v1/x", "192.0.2.8:1", read); w.Code != 200 {
		t.Errorf("another address: %d", w.Code)
	}
}

// A token's streams and long polls beyond --max-streams-per-token are
// refused 429 naming the limit; another token is not affected, and a
// closed one frees its place.
func TestGateLimitsOpenCallsPerToken(t *testing.T) {
	a, _ := NewToken()
	b, _ := NewToken()
	table, _ := NewTable([]Entry{
		{Name: "a", Scopes: []Scope{{"ticketing", Read}}, Hash: Hash(a)},
		{Name: "b", Scopes: []Scope{{"ticketing", Read}}, Hash: Hash(b)},
	}, "")
	h, release := testGate(t, table, nil, 2)
	var wg sync.WaitGroup
	p := table.Lookup(a)
	for range 2 {
		wg.Go(func() { call(h, "/v1/wait", "127.0.0.1:1", a) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for p.open.Load() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	w := call(h, "/v1/wait", "127.0.0.1:1", a)
	if w.Code != 429 || !strings.Contains(w.Body.String(), "--max-streams-per-token") {
		t.Errorf("a third stream: %d %s", w.Code, w.Body)
	}
	if w := call(h, "/v1/x", "127.0.0.1:1", a); w.Code != 200 {
		t.Errorf("a short call of the same token: %d", w.Code)
	}
	done := make(chan int)
	go func() { done <- call(h, "/v1/wait", "127.0.0.1:1", b).Code }()
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("another token's stream: %d", code)
	}
	wg.Wait()
	if p.open.Load() != 0 {
		t.Errorf("%d open after every call ended", p.open.Load())
	}
}

func TestBearer(t *testing.T) {
	for h, want := range map[string]string{"Bearer abc": "abc", "bearer abc ": "abc", "Basic abc": "", "Bearer": "", "": ""} {
		if got := bearer(h); got != want {
			t.Errorf("bearer(%q) = %q, want %q", h, got, want)
		}
	}
}

// A valid token's check costs no allocation beyond routing's.
func TestLookupAllocatesNothing(t *testing.T) {
	tok, _ := NewToken()
	table, _ := NewTable([]Entry{{Name: "a", Scopes: []Scope{{"ticketing", Read}}, Hash: Hash(tok)}}, "")
	if n := testing.AllocsPerRun(100, func() { table.Lookup(tok) }); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

// A reload keeps the principal of a token it keeps unchanged, so what
// the token holds open still counts; a token whose scopes changed is a
// new principal.
func TestSetTableCarriesPrincipals(t *testing.T) {
	tok := "surge_" + strings.Repeat("k", 40)
	read, _ := ParseScopes("ticketing:read")
	write, _ := ParseScopes("ticketing:write")
	t1, _ := NewTable([]Entry{{Name: "a", Scopes: read, Hash: Hash(tok)}}, "")
	g := NewGate(GateConfig{Table: t1})
	p := g.table.Load().Lookup(tok)
	p.open.Add(3)
	t2, _ := NewTable([]Entry{{Name: "a", Scopes: read, Hash: Hash(tok)}}, "")
	g.SetTable(t2)
	if q := g.table.Load().Lookup(tok); q != p || q.open.Load() != 3 {
		t.Fatalf("unchanged token: principal %p (open %d), want %p (open 3)", q, q.open.Load(), p)
	}
	t3, _ := NewTable([]Entry{{Name: "a", Scopes: write, Hash: Hash(tok)}}, "")
	g.SetTable(t3)
	if q := g.table.Load().Lookup(tok); q == p || !q.Allows(Need{Workload: "ticketing", Role: Write}) {
		t.Fatalf("changed scopes: got the old principal or the old scopes")
	}
}
