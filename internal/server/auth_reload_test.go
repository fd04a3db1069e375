package server

import (
	"errors"
	"net/http"
	"testing"

	"github.com/surge-run/surge/internal/auth"
)

// Reloading the tokens (SIGHUP) revokes a removed token at its next call,
// admits a new one, and keeps the old tokens when the new ones do not
// build.
func TestTokensReload(t *testing.T) {
	tokens := map[string]string{}
	entry := func(name string) auth.Entry {
		tok, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tok
		sc, _ := auth.ParseScopes("ticketing:read")
		return auth.Entry{Name: name, Scopes: sc, Hash: auth.Hash(tok)}
	}
	old, added := entry("old"), entry("new")
	first, err := auth.NewTable([]auth.Entry{old}, "")
	if err != nil {
		t.Fatal(err)
	}
	next := func() (*auth.Table, error) { return auth.NewTable([]auth.Entry{added}, "") }
	s, base := serveWithAuth(t, Config{Auth: AuthConfig{Tokens: first, Reload: func() (*auth.Table, error) { return next() }}})
	status := func(name string) int {
		t.Helper()
		r, _ := http.NewRequest("GET", base+"/v2/events/none", nil)
		r.Header.Set("Authorization", "Bearer "+tokens[name])
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := status("old"), status("new"); a != http.StatusNotFound || b != http.StatusUnauthorized {
		t.Fatalf("before the reload: old %d, new %d; want 404 (served) and 401", a, b)
	}
	if err := s.ReloadTokens(); err != nil {
		t.Fatal(err)
	}
	if a, b := status("old"), status("new"); a != http.StatusUnauthorized || b != http.StatusNotFound {
		t.Fatalf("after the reload: old %d, new %d; want 401 and 404 (served)", a, b)
	}
	next = func() (*auth.Table, error) { return nil, errors.New("--tokens f: line 3: bad scope") }
	if err := s.ReloadTokens(); err == nil {
		t.Fatal("a reload that failed reported no error")
	}
	if b := status("new"); b != http.StatusNotFound {
		t.Fatalf("after a failed reload the kept token answers %d, want 404 (served)", b)
	}
}
