package api

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"
)

// The lean HTTP/2 server over TLS.
//
// Over TLS net/http does the handshake on the connection's goroutine
// and, when the client chose "h2" by ALPN, calls TLSNextProto["h2"] with
// the *tls.Conn, closing the connection when that returns. With
// --http2-lean that entry is serveTLS, so a crowd on an HTTPS port costs
// what it costs on h2c. The tls.Conn wraps the trackedConn the listener
// admitted: the tracker's states, the deadlines and the close go to the
// trackedConn, the frames through the tls.Conn. The cleartext tricks do
// not apply: the tracker gives a TLS connection no coalescing buffer,
// and its first bytes are a ClientHello, never the h2c preface, so
// trackedConn.Write does not yield; the lean writer's own yield (one per
// batch of frames, h2_writer.go) stays, since batching answers into one
// TLS write saves records and system calls as it saves writes in clear.

// tlsNextProto is what ServeTLS sets as net/http's TLSNextProto with the
// lean HTTP/2 server: net/http's own HTTP/2 server is then never set up,
// and HTTP/1.1 over TLS stays with net/http.
func (h *h2Server) tlsNextProto() map[string]func(*http.Server, *tls.Conn, http.Handler) {
	return map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": h.serveTLS}
}

// serveTLS serves a TLS connection that negotiated "h2". net/http has
// reported it StateNew to the tracker and, without the hook, active; the
// lean server reports it active and idle after the preface, as net/http's
// HTTP/2 server does, and net/http reports it closed after this returns.
func (h *h2Server) serveTLS(_ *http.Server, conn *tls.Conn, base http.Handler) {
	tc, ok := trackedOf(conn)
	if !ok {
		// Only ServeTLS installs serveTLS, on a listener of tracked
		// connections.
		h.logf("http2: lean server: TLS connection from %s is not tracked; closing it", conn.RemoteAddr())
		return
	}
	c := newH2Conn(h, tc, nil)
	c.tls, c.rd.src = conn, conn
	state := conn.ConnectionState()
	c.tlsState = &state
	if b, ok := base.(interface{ BaseContext() context.Context }); ok {
		// The context net/http made for the connection (ConnContext saw
		// the tls.Conn), as its HTTP/2 server uses.
		c.ctx = b.BaseContext()
	}
	if !h.add(c) {
		return
	}
	h.conned.Add(1)
	c.serve()
	h.remove(c)
}

// writeSocket writes encoded frames to the client within the write
// timeout. In clear they go to the socket directly, past
// trackedConn.Write, which would yield a second time; over TLS through
// the tls.Conn, whose records reach the socket through trackedConn.Write
// (counted there, and not yielding: see above).
func (c *h2Conn) writeSocket(buf []byte) (int, error) {
	c.tc.Conn.SetWriteDeadline(time.Now().Add(c.lim.WriteTimeout))
	if c.tls != nil {
		return c.tls.Write(buf)
	}
	c.tc.writes.Add(1)
	return c.tc.Conn.Write(buf)
}

// closeWrite ends the server's side once GOAWAY is out: over TLS a
// close_notify first, so the client reads a clean end of the TLS stream
// rather than a truncated one, then the FIN.
func (c *h2Conn) closeWrite() {
	if c.tls != nil {
		c.tls.CloseWrite()
	}
	c.tc.CloseWrite()
}
