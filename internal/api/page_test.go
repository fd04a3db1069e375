package api

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestSmallestAndMerge(t *testing.T) {
	keys := map[string]bool{"d": true, "a": true, "c": true, "e": true, "b": true}
	if got := Smallest(maps.Keys(keys), "", 3); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("first page %v", got)
	}
	if got := Smallest(maps.Keys(keys), "c", 3); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("after c %v", got)
	}
	id := func(s string) string { return s }
	page, next := MergePage([][]string{{"a", "c", "e"}, {"b", "d"}}, id, 2)
	if !slices.Equal(page, []string{"a", "b"}) || next != "b" {
		t.Errorf("merge: %v next %q", page, next)
	}
	page, next = MergePage([][]string{{"e"}, {"d"}}, id, 2)
	if !slices.Equal(page, []string{"d", "e"}) || next != "" {
		t.Errorf("last page: %v next %q", page, next)
	}
}

func TestParsePage(t *testing.T) {
	for _, c := range []struct{ query, err string }{
		{"", ""},
		{"limit=7&after=x", ""},
		{"limit=0", "limit must be a whole number from 1 to 10, got"},
		{"limit=11", "from 1 to 10"},
		{"limit=x", "from 1 to 10"},
		{"after=" + strings.Repeat("k", 9), "after must be a key of at most 8 bytes, got 9"},
	} {
		w := httptest.NewRecorder()
		p, ok := ParsePage(w, httptest.NewRequest("GET", "/x?"+c.query, nil), 5, 10, 8)
		if c.err == "" {
			if !ok || (c.query == "" && (p.Limit != 5 || p.After != "")) || (c.query != "" && (p.Limit != 7 || p.After != "x")) {
				t.Errorf("%q: %+v %v", c.query, p, ok)
			}
			continue
		}
		if ok || w.Code != 400 || !strings.Contains(w.Body.String(), c.err) {
			t.Errorf("%q: ok %v, %d %s; want 400 %s", c.query, ok, w.Code, w.Body, c.err)
		}
	}
}

// Paging 10,000 keys spread over partitions, as the operator reads do
// (each partition asked for limit+1 above the cursor, the answers
// merged), visits every key once, in order, and ends with no cursor.
func TestPagingVisitsEveryKeyOnce(t *testing.T) {
	parts := make([]map[string]bool, 5)
	for i := range parts {
		parts[i] = map[string]bool{}
	}
	var want []string
	for i := range 10_000 {
		k := fmt.Sprintf("%08x", uint32(i)*2654435761)
		parts[i%len(parts)][k] = true
		want = append(want, k)
	}
	slices.Sort(want)
	const limit = 137
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		answers := make([][]string, len(parts))
		for i, p := range parts {
			answers[i] = Smallest(maps.Keys(p), after, limit+1)
		}
		page, next := MergePage(answers, func(s string) string { return s }, limit)
		got = append(got, page...)
		if next == "" {
			break
		}
		if pages > 10_000/limit+1 || next != page[len(page)-1] {
			t.Fatalf("page %d: next %q after %d keys", pages, next, len(page))
		}
		after = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged %d keys, want %d in order", len(got), len(want))
	}
}
