package auth

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Route is what the gate knows of one route or gRPC procedure.
type Route struct {
	Need Need
	// RPC routes answer refusals in their protocol (gRPC, gRPC-Web,
	// Connect) instead of JSON.
	RPC bool
	// LongLived calls (streams, long polls) count against their token's
	// limit on open streams and waiters while they last.
	LongLived bool
}

// Routes is the scope of every route the server serves, filled while the
// routes are registered (the server refuses to register one without) and
// read-only once it serves.
type Routes struct {
	byPattern map[string]Route
	// services are the gRPC service prefixes, whose procedures are in
	// byProcedure; a path under a prefix naming no procedure needs any
	// valid token (connect then answers it is not implemented).
	services    map[string]bool
	byProcedure map[string]Route
}

// NewRoutes returns an empty registry.
func NewRoutes() *Routes {
	return &Routes{byPattern: map[string]Route{}, services: map[string]bool{}, byProcedure: map[string]Route{}}
}

// Add gives the mux pattern its route; a pattern given twice is a bug.
func (rs *Routes) Add(pattern string, r Route) error {
	if _, dup := rs.byPattern[pattern]; dup {
		return fmt.Errorf("route %q has a scope already", pattern)
	}
	if _, path, _ := strings.Cut(pattern, " "); rs.isProcedure(pattern) || rs.isProcedure(path) {
		// The gate finds a procedure by its path alone.
		return fmt.Errorf("route %q is a gRPC procedure's path", pattern)
	}
	rs.byPattern[pattern] = r
	return nil
}

func (rs *Routes) isProcedure(path string) bool {
	_, ok := rs.byProcedure[path]
	return ok
}

// Has reports whether pattern has its scope.
func (rs *Routes) Has(pattern string) bool {
	_, ok := rs.byPattern[pattern]
	return ok
}

// procedure is the route of a gRPC procedure's path.
func (rs *Routes) procedure(path string) (Route, bool) {
	r, ok := rs.byProcedure[path]
	return r, ok
}

// Known reports whether key is a pattern or a procedure with its scope.
func (rs *Routes) Known(key string) bool {
	_, ok := rs.byProcedure[key]
	return ok || rs.Has(key)
}

// AddService gives the gRPC service at prefix ("/pkg.Service/") and each
// of its procedures ("/pkg.Service/Method") their routes; a path under
// the prefix that names no procedure gets the service's own need.
func (rs *Routes) AddService(prefix string, service Need, procedures map[string]Route) error {
	if err := rs.Add(prefix, Route{Need: service, RPC: true}); err != nil {
		return err
	}
	rs.services[prefix] = true
	for p, r := range procedures {
		if !strings.HasPrefix(p, prefix) {
			return fmt.Errorf("procedure %q is not under its service %q", p, prefix)
		}
		if rs.Has(p) || rs.Has("POST "+p) || rs.Has("GET "+p) {
			return fmt.Errorf("procedure %q is an HTTP route's path too", p)
		}
		r.RPC = true
		rs.byProcedure[p] = r
	}
	return nil
}

// Find returns the route of a request the mux matched to pattern; ok is
// false for a pattern nobody gave a scope, which the gate refuses.
func (rs *Routes) Find(pattern, path string) (r Route, ok bool) {
	if pattern == "" {
		// No route matched (a mux without the JSON fallback): the
		// router answers 404 to any valid token.
		return Route{Need: Need{Role: Any}}, true
	}
	r, ok = rs.byPattern[pattern]
	if ok && rs.services[pattern] {
		if pr, found := rs.byProcedure[path]; found {
			return pr, true
		}
	}
	return r, ok
}

// Listed is one route or procedure as Each lists it.
type Listed struct {
	// Pattern is the mux pattern, or for a procedure its path.
	Pattern string
	Route
	// Procedure is true for a gRPC procedure.
	Procedure bool
}

// Each lists every route and procedure, sorted, for tests and docs.
func (rs *Routes) Each() []Listed {
	var out []Listed
	for _, p := range slices.Sorted(maps.Keys(rs.byPattern)) {
		if !rs.services[p] {
			out = append(out, Listed{Pattern: p, Route: rs.byPattern[p]})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(rs.byProcedure)) {
		out = append(out, Listed{Pattern: p, Route: rs.byProcedure[p], Procedure: true})
	}
	return out
}

// MethodRole is the role a route needs by its method when its workload
// does not say: GET and HEAD read, anything else (or a pattern with no
// method) writes.
func MethodRole(pattern string) Role {
	method, _, ok := strings.Cut(pattern, " ")
	if ok && (method == "GET" || method == "HEAD") {
		return Read
	}
	return Write
}

// ProcedureRole is the role a gRPC procedure needs when its workload
// does not say: Get... and List... calls read, the others write.
func ProcedureRole(procedure string) Role {
	i := strings.LastIndexByte(procedure, '/')
	name := procedure[i+1:]
	if strings.HasPrefix(name, "Get") || strings.HasPrefix(name, "List") {
		return Read
	}
	return Write
}
