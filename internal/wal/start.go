package wal

import "github.com/surge-run/surge/internal/cmdlog"

// Start is the position of the oldest record still retained: where a
// reader that has no snapshot must begin.
func (l *Log) Start() cmdlog.Position {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	return cmdlog.Position(l.segs[0].base)
}
