package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/server"
)

// The two lines `surge token new` prints are a token and the tokens
// file's line that makes the server know it, by name and scopes.
func TestTokenNewLineServes(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"token", "new", "--name", "ci", "--scope", "ticketing:read,jobs:worker"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], auth.TokenPrefix) || strings.Contains(lines[1], lines[0]) {
		t.Fatalf("output %q: want the token, then a line without it", out.String())
	}
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# CI\n"+lines[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg server.AuthConfig
	t.Setenv(adminTokenVar, "")
	if err := (&authFlags{tokensFile: file, cfg: &cfg}).resolve(); err != nil {
		t.Fatal(err)
	}
	p := cfg.Tokens.Lookup(lines[0])
	if p == nil || p.Name != "ci" || !p.Allows(auth.Need{Workload: "jobs", Role: auth.Worker}) || p.Allows(auth.Need{Workload: "ticketing", Role: auth.Write}) {
		t.Fatalf("the token reads as %+v", p)
	}
}

func TestTokenNewRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--scope", "ticketing:read"},
		{"--name", "ci", "--scope", "ticketing:root"},
		{"--name", "a/b", "--scope", "ticketing:read"},
	} {
		root := newRootCmd()
		root.SetOut(new(bytes.Buffer))
		root.SetArgs(append([]string{"token", "new"}, args...))
		if err := root.Execute(); err == nil || exitStatus(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// A bad tokens file, a short bootstrap token or token-only metrics
// without tokens stop `surge serve` with the reason.
func TestServeRefusesBadAuth(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(bad, []byte("ci ticketing:read sha256:1234\n"), 0o600)
	_ = os.WriteFile(empty, []byte("# nobody yet\n"), 0o600)
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"--tokens", bad}, "line 1: the hash must be sha256:"},
		{"", []string{"--tokens", empty}, "holds no token"},
		{"", []string{"--tokens", filepath.Join(dir, "missing")}, "--tokens (SURGE_TOKENS_FILE)"},
		{"short", nil, "SURGE_ADMIN_TOKEN is 5 characters"},
		{"", []string{"--metrics-access", "token"}, "--metrics-access token"},
		{"", []string{"--metrics-access", "maybe"}, "must be open, token or off"},
	} {
		t.Setenv(adminTokenVar, c.env)
		root := newRootCmd()
		root.SetArgs(append([]string{"serve", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0"}, c.args...))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
		}
	}
}
