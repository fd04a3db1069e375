package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/server"
)

// adminTokenVar holds the bootstrap admin token: an environment variable
// only, never a flag, because flags show in ps.
const adminTokenVar = "SURGE_ADMIN_TOKEN"

// authFlags are `surge serve`'s authentication flags.
type authFlags struct {
	tokensFile string
	cfg        *server.AuthConfig
}

func addAuthFlags(f *pflag.FlagSet, env *envVars, cfg *server.AuthConfig) *authFlags {
	a := &authFlags{cfg: cfg}
	f.StringVar(&a.tokensFile, "tokens", "", env.help("tokens", "SURGE_TOKENS_FILE",
		"file of API tokens, one a line: <name> <scope>[,<scope>...] sha256:<hex> (`surge token new` prints one); with it or "+adminTokenVar+" every call but the health checks needs a token of its route's scope (docs/API.md, Authentication)"))
	f.StringVar(&cfg.MetricsAccess, "metrics-access", server.MetricsOpen, env.help("metrics-access", "SURGE_METRICS_ACCESS",
		"who may read /metrics and /actuator/prometheus: open, token (any valid token) or off"))
	f.IntVar(&cfg.MaxOpenPerToken, "max-streams-per-token", auth.DefaultMaxOpenPerToken, env.help("max-streams-per-token", "SURGE_MAX_STREAMS_PER_TOKEN",
		"streams and waiting calls (long polls) one token may hold open at once; beyond it 429 / RESOURCE_EXHAUSTED"))
	f.IntVar(&cfg.MaxAuthFailures, "max-auth-failures", auth.MaxAuthFailures, env.help("max-auth-failures", "SURGE_MAX_AUTH_FAILURES",
		fmt.Sprintf("failed authentications (no token or an unknown one) a client address may make per %v; beyond it 429 with Retry-After until the window ends", auth.AuthFailureWindow)))
	return a
}

// resolve reads the tokens file and the bootstrap token into the table;
// auth stays off without either. The server reads the file again on
// SIGHUP (AuthConfig.Reload), keeping the bootstrap token.
func (a *authFlags) resolve() error {
	bootstrap := os.Getenv(adminTokenVar)
	// Processes the server starts need not inherit the secret.
	_ = os.Unsetenv(adminTokenVar)
	if a.tokensFile == "" && bootstrap == "" {
		return nil
	}
	table, err := a.load(bootstrap)
	if err != nil {
		return err
	}
	a.cfg.Tokens = table
	if a.tokensFile != "" {
		a.cfg.Reload = func() (*auth.Table, error) { return a.load(bootstrap) }
	}
	return nil
}

// load builds the table from the tokens file (if any) and bootstrap.
func (a *authFlags) load(bootstrap string) (*auth.Table, error) {
	var entries []auth.Entry
	if a.tokensFile != "" {
		f, err := os.Open(a.tokensFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens (SURGE_TOKENS_FILE): %w", err)
		}
		defer f.Close()
		if entries, err = auth.ParseFile(f); err != nil {
			return nil, fmt.Errorf("--tokens %s: %w", a.tokensFile, err)
		}
	}
	table, err := auth.NewTable(entries, bootstrap)
	if err != nil {
		return nil, err
	}
	if table.Len() == 0 {
		return nil, fmt.Errorf("--tokens %s holds no token: every call would be refused; add a line (`surge token new`) or give %s", a.tokensFile, adminTokenVar)
	}
	return table, nil
}
