package api

import (
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"time"
)

// errorLogEvery is how often net/http's error log may write a line.
// Its lines (TLS handshake failures, malformed HTTP/2 frames) are caused
// by clients, and a port scanner or a broken client can cause thousands
// a second: unthrottled they would fill the disk and bury the server's
// own log.
const errorLogEvery = 5 * time.Second

// throttledWriter writes at most one line every errorLogEvery, telling
// with the next one how many it dropped meanwhile.
type throttledWriter struct {
	mu      sync.Mutex
	w       io.Writer
	now     func() time.Time
	last    time.Time
	dropped int
}

func (t *throttledWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if !t.last.IsZero() && now.Sub(t.last) < errorLogEvery {
		t.dropped++
		return len(p), nil
	}
	t.last = now
	if t.dropped > 0 {
		fmt.Fprintf(t.w, "(%d more lines like the next dropped in the last %v)\n", t.dropped, errorLogEvery)
		t.dropped = 0
	}
	return t.w.Write(p)
}

// newErrorLog is the http.Server's ErrorLog: stderr, as net/http's
// default, but throttled.
func newErrorLog() *log.Logger {
	return log.New(&throttledWriter{w: os.Stderr, now: time.Now}, "http: ", log.LstdFlags)
}
