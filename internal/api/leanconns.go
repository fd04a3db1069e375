package api

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// leanConns are a lean server's open connections (the HTTP/1.1 loop's or
// the HTTP/2 server's), closed to newcomers once shutting is set, so
// Shutdown and Close find every one.
type leanConns[C comparable] struct {
	shutting atomic.Bool
	mu       sync.Mutex
	conns    map[C]struct{}
}

func (s *leanConns[C]) add(c C) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = map[C]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *leanConns[C]) remove(c C) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// each calls f on every connection, under the set's lock.
func (s *leanConns[C]) each(f func(C)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		f(c)
	}
}

// drain calls nudge on every connection each leanShutdownPoll (to close
// it if idle, or tell it the server is going away) until none is left,
// or ctx is done.
func (s *leanConns[C]) drain(ctx context.Context, nudge func(C)) error {
	tick := time.NewTicker(leanShutdownPoll)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.conns)
		for c := range s.conns {
			nudge(c)
		}
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if l := s.srv.ErrorLog; l != nil {
		l.Printf(format, args...)
	}
}

// connContext is a connection's context on a lean server, as net/http
// makes it: the server, the local address, then ConnContext's values.
func (s *Server) connContext(nc net.Conn) context.Context {
	ctx := context.WithValue(context.Background(), http.ServerContextKey, s.srv)
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	if cc := s.srv.ConnContext; cc != nil {
		ctx = cc(ctx, nc)
	}
	return ctx
}
