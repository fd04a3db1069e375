package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/module"
)

// mount builds the server's routes: health, metrics, every module's
// routes and gRPC services, the cluster's calls and pprof.
func (s *Server) mount(ctx context.Context, parts []module.Parts) error {
	s.mux = http.NewServeMux()
	s.routes = auth.NewRoutes()
	all := api.NewMetrics(s.reg)
	s.lean = all.Lean()
	m := s.serverMetrics(all)
	s.mountHealth(m)
	s.mountConsole(m)
	s.mountOverview(m)
	host := module.Host{Context: ctx, Engine: s.eng, Mux: s.mux, Registry: s.reg,
		Healthy: s.healthy, GRPCOptions: grpcHandlerOptions}
	var services []module.GRPCService
	for i, p := range parts {
		if p.Serve == nil {
			continue
		}
		host.Metrics = s.moduleMetrics(all, s.cfg.Modules[i])
		served, err := p.Serve(host)
		if err == nil {
			err = s.declareServices(s.cfg.Modules[i], served.GRPC)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s.cfg.Modules[i].Name, err)
		}
		s.served = append(s.served, served)
		services = append(services, served.GRPC...)
	}
	if err := mountGRPC(s.mux, m, s.routes, s.healthy, services); err != nil {
		return err
	}
	if s.node != nil {
		s.declareCluster()
		mountCluster(s.mux, m, s.node, s.eng)
	}
	if s.cfg.Pprof {
		s.declarePprof()
		s.startContention()
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if err := s.checkRoles(); err != nil {
		return err
	}
	s.installGate()
	return nil
}

// healthy is true while the server accepts requests and its log works.
func (s *Server) healthy() bool { return s.ready.Load() && !s.eng.Failed() }

// mountHealth serves the health checks and the metrics.
func (s *Server) mountHealth(m *api.Metrics) {
	health := func(w http.ResponseWriter, r *http.Request) int {
		if !s.ready.Load() {
			return api.Error(w, http.StatusServiceUnavailable, "not ready")
		}
		if s.eng.Failed() {
			return api.Error(w, http.StatusServiceUnavailable, "the command log failed; this node refuses all requests until it is restarted")
		}
		if s.node != nil {
			// The first line stays "ok" for existing probes.
			api.Write(w, http.StatusOK, false, []byte("ok\n"+ownedLine(s.node)))
			return http.StatusOK
		}
		api.Write(w, http.StatusOK, false, []byte("ok\n"))
		return http.StatusOK
	}
	s.declareHealth()
	m.HandleLean(s.mux, "GET /healthz", health)
	m.HandleLean(s.mux, "GET /v1/health_check", health)
	// The Spring Boot actuator's probes, which the commerce peer's tooling uses.
	actuatorHealth := func(w http.ResponseWriter, r *http.Request) int {
		if !s.healthy() {
			api.Write(w, http.StatusServiceUnavailable, true, []byte(`{"status":"DOWN"}`+"\n"))
			return http.StatusServiceUnavailable
		}
		api.Write(w, http.StatusOK, true, []byte(`{"status":"UP"}`+"\n"))
		return http.StatusOK
	}
	m.Handle(s.mux, "GET /actuator/health", actuatorHealth)
	// Kubernetes probes of Spring Boot apps use these two. A failed log
	// needs a restart, so liveness goes DOWN with readiness.
	m.Handle(s.mux, "GET /actuator/health/liveness", actuatorHealth)
	m.Handle(s.mux, "GET /actuator/health/readiness", actuatorHealth)
	m.Handle(s.mux, "GET /actuator/info", func(w http.ResponseWriter, r *http.Request) int {
		api.Write(w, http.StatusOK, true, []byte(`{"app":{"name":"surge"}}`+"\n"))
		return http.StatusOK
	})
	metricsHandler := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	s.mountMetrics(metricsHandler)
}
