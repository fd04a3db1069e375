package server

import (
	"encoding/json"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/console"
)

// WhoAmIPath answers who the caller's token is and what it may do.
const WhoAmIPath = "/v1/auth/whoami"

// whoAmI is GET /v1/auth/whoami's answer: the console hides the actions
// a token's roles do not allow (the server refuses them anyway).
type whoAmI struct {
	// Auth is false when the server runs without tokens: every call is
	// open, so every role is admin.
	Auth   bool     `json:"auth"`
	Name   string   `json:"name,omitempty"`
	Scopes []string `json:"scopes"`
	// Roles is, per workload, the highest of read, write and admin the
	// token holds, or "none".
	Roles map[string]string `json:"roles"`
}

// mountConsole serves the console (open: its files hold no data, and the
// page asks for a token before it reads anything) and the whoami route
// it starts with (any valid token).
func (s *Server) mountConsole(m *api.Metrics) {
	s.declare("GET "+WhoAmIPath, auth.Route{Need: auth.Need{Role: auth.Any}})
	m.Handle(s.mux, "GET "+WhoAmIPath, s.whoAmI)
	if !s.cfg.UI {
		return
	}
	s.declare("GET "+console.Path, auth.Route{Need: auth.Need{Open: true}})
	s.mux.Handle("GET "+console.Path, console.Handler())
}

func (s *Server) whoAmI(w http.ResponseWriter, r *http.Request) int {
	ans := whoAmI{Scopes: []string{}, Roles: map[string]string{}}
	g := s.gate.Load()
	if g == nil {
		ans.Scopes = append(ans.Scopes, auth.Scope{Workload: auth.AllWorkloads, Role: auth.Admin}.String())
		for _, wl := range auth.Workloads {
			ans.Roles[wl] = auth.Admin.String()
		}
		return writeWhoAmI(w, ans)
	}
	p := g.Principal(r)
	if p == nil { // the token was removed between the gate and here
		return api.Error(w, http.StatusUnauthorized, "the token is not valid any more")
	}
	ans.Auth, ans.Name = true, p.Name
	for _, sc := range p.Scopes {
		ans.Scopes = append(ans.Scopes, sc.String())
	}
	for _, wl := range auth.Workloads {
		role := "none"
		if best := p.Best(wl); best != auth.Any {
			role = best.String()
		}
		ans.Roles[wl] = role
	}
	return writeWhoAmI(w, ans)
}

func writeWhoAmI(w http.ResponseWriter, v whoAmI) int {
	b, err := json.Marshal(v)
	if err != nil {
		return api.Error(w, http.StatusInternalServerError, err.Error())
	}
	api.Write(w, http.StatusOK, true, append(b, '\n'))
	return http.StatusOK
}
