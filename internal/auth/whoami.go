package auth

import "net/http"

// Principal returns who the request's token speaks for under the tokens
// in force now, or nil. The gate has already refused a request without a
// valid token, so a handler behind it asks this only to describe the
// caller (GET /v1/auth/whoami).
func (g *Gate) Principal(r *http.Request) *Principal {
	return g.table.Load().Lookup(bearer(r.Header.Get("Authorization")))
}

// Best is the highest of read, write and admin that p holds for
// workload, or Any when p may not even read it. The worker role is left
// out: it allows no call a console or a person makes.
func (p *Principal) Best(workload string) Role {
	for _, r := range []Role{Admin, Write, Read} {
		if p.Allows(Need{Workload: workload, Role: r}) {
			return r
		}
	}
	return Any
}
