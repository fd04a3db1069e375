// Package apitest helps tests prove that requests at the API's limits
// make commands the command log can hold.
package apitest

import (
	"sync"

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
