// Package auth is Surge's API authentication and authorization: bearer
// tokens stored hashed in a tokens file (or one bootstrap admin token from
// the environment), scopes of a workload and a role, the scope each route
// and gRPC procedure requires, and the gate that checks them in front of
// the server's admission.
package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a scope allows within its workload. Read < Write < Admin:
// each implies the ones before it. Worker is apart: it allows the job
// worker's procedures (register, stream, ack, heartbeat, report,
// deregister) and nothing else.
type Role uint8

const (
	// Any is the least a route can require: a valid token of any scope.
	Any Role = iota
	Read
	Write
	Admin
	Worker
)

var roleNames = [...]string{Any: "any", Read: "read", Write: "write", Admin: "admin", Worker: "worker"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", r)
}

// AllWorkloads is the workload of a scope that covers every workload
// ("*:read"); a route needing it (pprof) takes only such a scope.
const AllWorkloads = "*"

// Workloads are the names a scope may give besides AllWorkloads.
var Workloads = []string{"ticketing", "commerce", "jobs", "sequencer"}

// Scope is one grant of a token: "<workload>:<role>".
type Scope struct {
	Workload string
	Role     Role
}

func (s Scope) String() string { return s.Workload + ":" + s.Role.String() }

// ParseScope reads "<workload>:<role>".
func ParseScope(text string) (Scope, error) {
	w, r, ok := strings.Cut(text, ":")
	if !ok {
		return Scope{}, fmt.Errorf("scope %q: want <workload>:<role>, e.g. ticketing:read", text)
	}
	if w != AllWorkloads && !slices.Contains(Workloads, w) {
		return Scope{}, fmt.Errorf("scope %q: workload %q is not one of %s or *", text, w, strings.Join(Workloads, ", "))
	}
	var role Role
	switch r {
	case "read":
		role = Read
	case "write":
		role = Write
	case "admin":
		role = Admin
	case "worker":
		if w != "jobs" {
			return Scope{}, fmt.Errorf("scope %q: the worker role exists only as jobs:worker", text)
		}
		role = Worker
	default:
		return Scope{}, fmt.Errorf("scope %q: role %q is not read, write, admin or (jobs only) worker", text, r)
	}
	return Scope{Workload: w, Role: role}, nil
}

// ParseScopes reads a comma-separated list of scopes.
func ParseScopes(text string) ([]Scope, error) {
	var out []Scope
	for _, part := range strings.Split(text, ",") {
		s, err := ParseScope(part)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Need is what a route requires of a caller.
type Need struct {
	// Open routes take no token at all (health checks).
	Open bool
	// Workload is the workload whose scope grants the route; "" for a
	// route any valid token may call; AllWorkloads for one only a "*"
	// scope grants.
	Workload string
	Role     Role
}

func (n Need) String() string {
	switch {
	case n.Open:
		return "open"
	case n.Workload == "" && n.Role == Any:
		return "any valid token"
	case n.Workload == "":
		return "any workload's " + n.Role.String()
	}
	s := Scope{Workload: n.Workload, Role: n.Role}.String()
	if n.Role == Worker {
		s += " (or jobs:admin)"
	}
	return s
}

// grants reports whether s is enough for n.
func (s Scope) grants(n Need) bool {
	if n.Workload != "" && s.Workload != AllWorkloads && s.Workload != n.Workload {
		return false
	}
	switch {
	case n.Role == Any:
		return true
	case n.Role == Worker:
		return s.Role == Worker || s.Role == Admin
	case s.Role == Worker:
		return false
	}
	return s.Role >= n.Role
}
