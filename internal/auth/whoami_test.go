package auth

import "testing"

// Best is the highest operator role a token holds in a workload: a
// "*" scope counts for every workload, a worker scope for none.
func TestPrincipalBest(t *testing.T) {
	for _, c := range []struct {
		scopes, workload string
		want             Role
	}{
		{"*:read", "jobs", Read},
		{"ticketing:write,*:read", "ticketing", Write},
		{"ticketing:write,*:read", "commerce", Read},
		{"commerce:admin", "commerce", Admin},
		{"commerce:admin", "sequencer", Any},
		{"jobs:worker", "jobs", Any},
		{"jobs:worker,jobs:read", "jobs", Read},
	} {
		sc, err := ParseScopes(c.scopes)
		if err != nil {
			t.Fatal(err)
		}
		if got := (&Principal{Scopes: sc}).Best(c.workload); got != c.want {
			t.Errorf("%s in %s: %v, want %v", c.scopes, c.workload, got, c.want)
		}
	}
}
