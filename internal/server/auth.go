package server

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/module"
)

// AuthConfig is the API's authentication and authorization (Config.Auth).
type AuthConfig struct {
	// Tokens, if set, turns authentication on: every call but the health
	// checks (and the cluster's internal endpoint, which authenticates
	// nodes its own way) needs a token whose scopes grant its route.
	Tokens *auth.Table
	// MetricsAccess is how /metrics and /actuator/prometheus are served:
	// MetricsOpen (also ""), MetricsToken or MetricsOff (--metrics-access).
	MetricsAccess string
	// MaxOpenPerToken bounds each token's open streams and waiting calls
	// (--max-streams-per-token); 0: auth.DefaultMaxOpenPerToken.
	MaxOpenPerToken int
	// MaxAuthFailures bounds the failed authentications of a client
	// address per auth.AuthFailureWindow (--max-auth-failures); 0:
	// auth.MaxAuthFailures.
	MaxAuthFailures int
	// Reload, if set, builds the tokens again (the tokens file read
	// anew): on SIGHUP or ReloadTokens the gate swaps to them, and a
	// table that does not build keeps the old one.
	Reload func() (*auth.Table, error)
}

// --metrics-access values.
const (
	MetricsOpen  = "open"
	MetricsToken = "token"
	MetricsOff   = "off"
)

func (c AuthConfig) check() error {
	switch c.MetricsAccess {
	case "", MetricsOpen, MetricsOff:
	case MetricsToken:
		if c.Tokens == nil {
			return fmt.Errorf("--metrics-access token (SURGE_METRICS_ACCESS): no tokens are configured; give --tokens or SURGE_ADMIN_TOKEN, or use open or off")
		}
	default:
		return fmt.Errorf("--metrics-access %q (SURGE_METRICS_ACCESS): must be open, token or off", c.MetricsAccess)
	}
	if c.MaxAuthFailures < 0 {
		return fmt.Errorf("--max-auth-failures %d (SURGE_MAX_AUTH_FAILURES): must be 0 (default %d) or more", c.MaxAuthFailures, auth.MaxAuthFailures)
	}
	if c.MaxOpenPerToken < 0 {
		return fmt.Errorf("--max-streams-per-token %d (SURGE_MAX_STREAMS_PER_TOKEN): must be 0 (default %d) or more", c.MaxOpenPerToken, auth.DefaultMaxOpenPerToken)
	}
	return nil
}

// Routes is every route's and procedure's scope, for tests and docs.
func (s *Server) Routes() *auth.Routes { return s.routes }

// serverMetrics is m for the server's own routes, each of which it gives
// a scope (declare) before registering it.
func (s *Server) serverMetrics(m *api.Metrics) *api.Metrics {
	return m.WithRouteHook(func(pattern string) {
		if !s.routes.Has(pattern) {
			panic(fmt.Sprintf("route %q is registered without a scope", pattern))
		}
	})
}

// moduleMetrics is m for mod's routes: each gets mod's workload and the
// role mod gives it or its method does.
func (s *Server) moduleMetrics(m *api.Metrics, mod module.Module) *api.Metrics {
	return m.WithRouteHook(func(pattern string) {
		if pattern == "/" { // the JSON 404/405 fallback (api.HandleFallback)
			s.declare(pattern, auth.Route{Need: auth.Need{Role: auth.Any}})
			return
		}
		role, ok := mod.Roles[pattern]
		if !ok {
			role = auth.MethodRole(pattern)
		}
		s.declare(pattern, auth.Route{Need: auth.Need{Workload: mod.Name, Role: role},
			LongLived: slices.Contains(mod.LongLived, pattern)})
	})
}

// declare gives pattern its scope; twice is a bug.
func (s *Server) declare(pattern string, r auth.Route) {
	if err := s.routes.Add(pattern, r); err != nil {
		panic(err)
	}
}

// declareServices gives each procedure of mod's gRPC services its scope,
// listing the procedures from the services' descriptors.
func (s *Server) declareServices(mod module.Module, services []module.GRPCService) error {
	for _, svc := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc.Name))
		sd, ok := d.(protoreflect.ServiceDescriptor)
		if err != nil || !ok {
			return fmt.Errorf("%s: gRPC service %q has no registered descriptor, so its procedures cannot be given scopes", mod.Name, svc.Name)
		}
		procs := map[string]auth.Route{}
		for i := range sd.Methods().Len() {
			proc := svc.Path + string(sd.Methods().Get(i).Name())
			role, ok := mod.Roles[proc]
			if !ok {
				role, ok = mod.Roles[svc.Path]
			}
			if !ok {
				role = auth.ProcedureRole(proc)
			}
			procs[proc] = auth.Route{Need: auth.Need{Workload: mod.Name, Role: role}, LongLived: slices.Contains(svc.LongLived, proc)}
		}
		if err := s.routes.AddService(svc.Path, auth.Need{Workload: mod.Name, Role: auth.Read}, procs); err != nil {
			return err
		}
	}
	return nil
}

// checkRoles refuses a module's role for a route it does not serve: a
// typo there would silently leave an admin call at its method's role.
func (s *Server) checkRoles() error {
	for _, mod := range s.cfg.Modules {
		for key := range mod.Roles {
			if !s.routes.Known(key) {
				return fmt.Errorf("%s: Roles names %q, which is no route or procedure it serves", mod.Name, key)
			}
		}
	}
	return nil
}

// mountMetrics serves the Prometheus metrics as --metrics-access says.
func (s *Server) mountMetrics(h http.Handler) {
	need := auth.Need{Open: true}
	switch s.cfg.Auth.MetricsAccess {
	case MetricsOff:
		return
	case MetricsToken:
		need = auth.Need{Role: auth.Any}
	}
	for _, p := range []string{"GET /metrics", "GET /actuator/prometheus"} {
		s.declare(p, auth.Route{Need: need})
		s.mux.Handle(p, h)
	}
}

// openRoutes are the health checks: open whatever the tokens.
var openRoutes = []string{"GET /healthz", "GET /v1/health_check", "GET /actuator/health",
	"GET /actuator/health/liveness", "GET /actuator/health/readiness", "GET /actuator/info"}

func (s *Server) declareHealth() {
	for _, p := range openRoutes {
		s.declare(p, auth.Route{Need: auth.Need{Open: true}})
	}
}

// pprofRoutes need a token of scope *:admin: profiles show memory.
var pprofRoutes = []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/symbol", "/debug/pprof/trace"}

func (s *Server) declarePprof() {
	for _, p := range pprofRoutes {
		s.declare(p, auth.Route{Need: auth.Need{Workload: auth.AllWorkloads, Role: auth.Admin}})
	}
}

// declareCluster: the cluster status needs any token; the internal
// endpoint authenticates nodes itself (docs/CLUSTER.md), not with API
// tokens.
func (s *Server) declareCluster() {
	s.declare(cluster.CallPath, auth.Route{Need: auth.Need{Open: true}})
	s.declare("GET /v1/cluster", auth.Route{Need: auth.Need{Role: auth.Any}})
}

// declareGRPC gives the health service (open) and reflection (any token)
// their scopes.
func declareGRPC(routes *auth.Routes, path string, open bool) error {
	need := auth.Need{Role: auth.Any}
	if open {
		need = auth.Need{Open: true}
	}
	return routes.AddService(path, need, nil)
}

// installGate puts the token gate in front of admission if tokens are
// configured.
func (s *Server) installGate() {
	if s.cfg.Auth.Tokens == nil {
		return
	}
	mux := s.mux
	g := auth.NewGate(auth.GateConfig{
		Table:  s.cfg.Auth.Tokens,
		Routes: s.routes,
		Route: func(w http.ResponseWriter, r *http.Request) string {
			if p, ok := api.LeanPattern(w, r, mux); ok {
				return p // the lean path's match: no second one
			}
			_, p := mux.Handler(r)
			return p
		},
		MaxOpen:  s.cfg.Auth.MaxOpenPerToken,
		Failures: auth.NewFailures(cmp.Or(s.cfg.Auth.MaxAuthFailures, auth.MaxAuthFailures), auth.AuthFailureWindow),
		Registry: s.reg,
		Logger:   s.logger,
	})
	s.limits.Gate = g.Wrap
	s.gate.Store(g)
	s.logger.Info("authentication on: every call but the health checks needs a token of its route's scope",
		"tokens", s.cfg.Auth.Tokens.Names(), "metrics_access", cmp.Or(s.cfg.Auth.MetricsAccess, MetricsOpen),
		"max_streams_per_token", cmp.Or(s.cfg.Auth.MaxOpenPerToken, auth.DefaultMaxOpenPerToken))
}

// ReloadTokens builds the tokens again (AuthConfig.Reload) and has the
// gate check calls against them from now on, as SIGHUP does; a table that
// does not build (a bad line, no token left) is refused and the old one
// kept. Without tokens or Reload it does nothing.
func (s *Server) ReloadTokens() error {
	g := s.gate.Load()
	if g == nil || s.cfg.Auth.Reload == nil {
		return nil
	}
	t, err := s.cfg.Auth.Reload()
	if err != nil {
		s.logger.Error("tokens not reloaded; the old ones stay", "err", err)
		return err
	}
	g.SetTable(t)
	s.logger.Info("tokens reloaded", "tokens", t.Names())
	return nil
}
