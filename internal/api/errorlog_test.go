package api

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// A flood of client-caused errors writes one line per errorLogEvery, and
// the next line says how many were dropped.
func TestErrorLogIsThrottled(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	w := &throttledWriter{w: &out, now: func() time.Time { return now }}
	for range 1000 {
		w.Write([]byte("TLS handshake error\n"))
	}
	if got := strings.Count(out.String(), "\n"); got != 1 {
		t.Fatalf("%d lines for a burst of 1000, want 1:\n%s", got, out.String())
	}
	now = now.Add(errorLogEvery)
	w.Write([]byte("TLS handshake error\n"))
	if !strings.Contains(out.String(), "(999 more lines like the next dropped") || strings.Count(out.String(), "\n") != 3 {
		t.Fatalf("after the interval:\n%s", out.String())
	}
}
