package server

import (
	"context"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// The overview's ring of the newest warnings and errors this node logged.
const (
	// MaxRecentErrors is how many records the ring keeps.
	MaxRecentErrors = 100
	// maxRecentMsg and maxRecentAttrs bound one kept record.
	maxRecentMsg   = 1024
	maxRecentAttrs = 16
)

// recentRecord is one kept log record, as the overview shows it.
type recentRecord struct {
	Time  time.Time         `json:"time"`
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs,omitempty"`
}

// recentLog keeps the newest MaxRecentErrors records of level WARN and
// above, whatever level the server's own handler writes.
type recentLog struct {
	mu    sync.Mutex
	ring  [MaxRecentErrors]recentRecord
	total int
}

func (l *recentLog) add(r recentRecord) {
	l.mu.Lock()
	l.ring[l.total%MaxRecentErrors] = r
	l.total++
	l.mu.Unlock()
}

// snapshot returns the kept records, oldest first, and how many were
// written since start.
func (l *recentLog) snapshot() ([]recentRecord, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(l.total, MaxRecentErrors)
	out := make([]recentRecord, 0, n)
	for i := l.total - n; i < l.total; i++ {
		out = append(out, l.ring[i%MaxRecentErrors])
	}
	return out, l.total
}

// recentHandler passes every record on to next and keeps the warnings
// and errors in log.
type recentHandler struct {
	next   slog.Handler
	log    *recentLog
	attrs  []slog.Attr // from WithAttrs, keys already prefixed
	prefix string      // from WithGroup: "g1.g2."
}

func withRecent(next slog.Handler, log *recentLog) slog.Handler {
	return &recentHandler{next: next, log: log}
}

func (h *recentHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *recentHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.keep(r)
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *recentHandler) keep(r slog.Record) {
	rec := recentRecord{Time: r.Time.UTC(), Level: r.Level.String(), Msg: cutText(r.Message, maxRecentMsg)}
	put := func(key string, v slog.Value) bool {
		if len(rec.Attrs) == maxRecentAttrs {
			return false
		}
		if rec.Attrs == nil {
			rec.Attrs = make(map[string]string)
		}
		rec.Attrs[key] = cutText(v.Resolve().String(), maxRecentMsg)
		return true
	}
	for _, a := range h.attrs {
		if !put(a.Key, a.Value) {
			break
		}
	}
	r.Attrs(func(a slog.Attr) bool { return put(h.prefix+a.Key, a.Value) })
	h.log.add(rec)
}

func (h *recentHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		c.attrs = append(c.attrs, slog.Attr{Key: h.prefix + a.Key, Value: a.Value})
	}
	return &c
}

func (h *recentHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.next = h.next.WithGroup(name)
	c.prefix = h.prefix + name + "."
	return &c
}

// cutText cuts s to at most n bytes on a rune boundary, marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
