package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/testcerts"
)

func TestBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":        false,
		"127.0.0.2:8080":        false,
		"[::1]:8080":            false,
		"[::ffff:127.0.0.1]:80": false,
		"localhost:8080":        false,
		":8080":                 true,
		"0.0.0.0:8080":          true,
		"[::]:8080":             true,
		"10.1.2.3:8080":         true,
		"[2001:db8::1]:8080":    true,
	} {
		got, err := beyondLoopback(addr)
		if err != nil || got != want {
			t.Errorf("beyondLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := beyondLoopback("no-port"); err == nil {
		t.Error("an address without a port was taken")
	}
}

// Off loopback a server refuses to start open: it names what it lacks
// and --insecure. With --insecure it starts and warns; with TLS and
// tokens it starts; a cluster node needs its secret too.
func TestOpenServerBeyondLoopbackIsRefused(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	tokens, err := auth.NewTable(nil, strings.Repeat("t", 40))
	if err != nil {
		t.Fatal(err)
	}
	tlsFiles := api.TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}
	start := func(cfg Config) (string, error) {
		var logs bytes.Buffer
		cfg.DataDir, cfg.Logger = t.TempDir(), slog.New(slog.NewTextHandler(&logs, nil))
		s, err := New(context.Background(), cfg)
		if err == nil {
			s.Shutdown()
		}
		return logs.String(), err
	}
	for _, c := range []struct {
		cfg  Config
		want []string // in the refusal; none: it starts
	}{
		{Config{Addr: "0.0.0.0:0"}, []string{"0.0.0.0:0", "TLS", "tokens", "--insecure"}},
		{Config{Addr: ":0", TLS: tlsFiles}, []string{"tokens", "--insecure"}},
		{Config{Addr: "[::]:0", Auth: AuthConfig{Tokens: tokens}}, []string{"TLS", "--insecure"}},
		{Config{Addr: "0.0.0.0:0", TLS: tlsFiles, Auth: AuthConfig{Tokens: tokens}}, nil},
		{Config{Addr: "127.0.0.1:0"}, nil},
		{Config{Addr: "0.0.0.0:0", TLS: tlsFiles, Auth: AuthConfig{Tokens: tokens},
			Cluster: ClusterConfig{Kafka: "127.0.0.1:1", Cluster: "c"}}, []string{"cluster secret", "--insecure"}},
	} {
		_, err := start(c.cfg)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want a start", c.cfg.Addr, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s open: started, want a refusal", c.cfg.Addr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to name %q", c.cfg.Addr, err, w)
			}
		}
		if c.cfg.Cluster.enabled() {
			continue // --insecure would go on to reach Kafka
		}
		c.cfg.Insecure = true
		if logs, err := start(c.cfg); err != nil || !strings.Contains(logs, "INSECURE") {
			t.Errorf("%s with --insecure: %v, logs %q; want a start and a warning", c.cfg.Addr, err, logs)
		}
	}
}
