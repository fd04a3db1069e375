package sequencer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type groupOpsOut struct {
	Name                       string
	Partition                  int
	Released, Last, Unreleased uint64
	Pending, Leased, Held      int
	Gap                        *struct {
		Seq   uint64
		State string
	}
	Consumers []struct {
		Name          string
		Position, Lag uint64
	}
}

// A group held by a client seq not yet published shows the gap, the
// processed messages it holds back, and a consumer's lag; groups page by
// name.
func TestOperatorGroups(t *testing.T) {
	srv, a := newAPIServer(t)
	g := "/v1/groups/held"
	must(t, srv, 201, "POST", g+"/messages", `{"messages":[{"id":"m1","seq":1},{"id":"m2","seq":2},{"id":"m4","seq":4},{"id":"m5","seq":5}]}`)
	l := must(t, srv, 200, "POST", g+"/lease", `{"processor":"p","max":3}`)
	must(t, srv, 200, "POST", g+"/complete", `{"processor":"p","seqs":`+seqList(seqsOf(t, l))+`}`)
	must(t, srv, 200, "POST", g+"/consumers/c1/commit", `{"position":1}`)
	// m5 stays pending.

	st, b := call(t, srv, "GET", "/v1/ops/groups/held", "")
	var one groupOpsOut
	if st != 200 || json.Unmarshal([]byte(b), &one) != nil {
		t.Fatalf("%d %s", st, b)
	}
	if one.Released != 2 || one.Last != 5 || one.Unreleased != 3 || one.Held != 1 || one.Pending != 1 ||
		one.Gap == nil || one.Gap.Seq != 3 || one.Gap.State != "unpublished" || one.Partition != a.part("held") {
		t.Errorf("held group: %s", b)
	}
	if len(one.Consumers) != 1 || one.Consumers[0].Name != "c1" || one.Consumers[0].Lag != 1 {
		t.Errorf("consumers: %s", b)
	}

	for i := range 12 {
		must(t, srv, 201, "POST", fmt.Sprintf("/v1/groups/g%02d/messages", i), `{"id":"x"}`)
	}
	var names []string
	after := ""
	for n := 0; n < 10; n++ {
		var p struct {
			Groups []groupOpsOut
			Next   string
		}
		st, b := call(t, srv, "GET", "/v1/ops/groups?limit=5&after="+after, "")
		if st != 200 || json.Unmarshal([]byte(b), &p) != nil {
			t.Fatalf("%d %s", st, b)
		}
		for _, g := range p.Groups {
			names = append(names, g.Name)
			if g.Name != "held" && (g.Gap == nil || g.Gap.Seq != 1 || g.Gap.State != "pending" || g.Unreleased != 1) {
				t.Errorf("group %s: %+v", g.Name, g)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if got := strings.Join(names, " "); got != "g00 g01 g02 g03 g04 g05 g06 g07 g08 g09 g10 g11 held" {
		t.Errorf("paged %s", got)
	}

	for _, c := range []struct {
		path string
		st   int
		msg  string
	}{
		{"/v1/ops/groups?limit=0", 400, "limit must be a whole number from 1 to 200"},
		{"/v1/ops/groups?limit=201", 400, "from 1 to 200"},
		{"/v1/ops/groups/nope", 404, `no group \"nope\"`},
		{"/v1/ops/groups/a%01b", 400, "group name"},
	} {
		if st, b := call(t, srv, "GET", c.path, ""); st != c.st || !strings.Contains(b, c.msg) {
			t.Errorf("%s: %d %s, want %d %s", c.path, st, b, c.st, c.msg)
		}
	}
}
