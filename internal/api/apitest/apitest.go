// Package apitest helps the workloads' API tests: prove that requests at
// the API's limits make commands the command log can hold, and that a
// large answer without a turn is refused as it should be.
package apitest

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
)

// EntryLog wraps a command log and remembers the largest entry appended
// to it: a request's command with the engine's envelope, as the log
// receives it.
type EntryLog struct {
	cmdlog.Log
	mu  sync.Mutex
	max int
}

// Append records the entries' sizes and appends them.
func (l *EntryLog) Append(entries []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.mu.Lock()
	for _, e := range entries {
		l.max = max(l.max, len(e.Data))
	}
	l.mu.Unlock()
	l.Log.Append(entries, done)
}

// TakeMax returns the largest entry appended since the last call.
func (l *EntryLog) TakeMax() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.max
	l.max = 0
	return m
}

// Longest is a value of exactly n bytes that the field rules accept, made
// of multi-byte characters: the codecs store strings as their UTF-8
// bytes, so a byte is a byte whatever the character.
func Longest(n int) string {
	s := strings.Repeat("é", n/2)
	if n%2 == 1 {
		s += "q"
	}
	return s
}

// WantBusy GETs url and fails t unless the answer is 503 with a
// Retry-After: a large answer that found no turn (api.Turns).
func WantBusy(t testing.TB, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("GET %s with no turn free: %d, Retry-After %q; want 503 with a pause", url, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
