package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/surge-run/surge/internal/testcerts"
)

// startLeanTLS serves h over TLS (a fresh CA's server certificate, and
// clients' CA if clientCA is set) with the lean HTTP/2 server on.
func startLeanTLS(t *testing.T, h http.Handler, lim Limits, ca *testcerts.CA, clientCA string) (*Server, string) {
	t.Helper()
	pair := ca.Server(t)
	s, _, addr := startTLSServer(t, h, leanH2(lim), TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clientCA}, nil)
	return s, addr
}

// dialH2TLS is dialH2 over TLS: a handshake that negotiates "h2", then
// the preface and SETTINGS through it.
func dialH2TLS(t *testing.T, ca *testcerts.CA, addr string) *rawH2 {
	t.Helper()
	return dialH2TLSOver(t, ca, dial(t, addr).Conn, 0)
}

// dialH2TLSOver is dialH2TLS over nc, with TLS up to maxVersion (0: the
// default).
func dialH2TLSOver(t *testing.T, ca *testcerts.CA, nc net.Conn, maxVersion uint16) *rawH2 {
	t.Helper()
	tc := tls.Client(nc, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MaxVersion: maxVersion})
	tc.SetDeadline(time.Now().Add(hang))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.SetDeadline(time.Time{})
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN chose %q, want h2", p)
	}
	return startH2(t, tc)
}

// tlsStateHandler answers what the request knows of its TLS connection.
func tlsStateHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "r.TLS is nil", http.StatusInternalServerError)
			return
		}
		cs := r.TLS
		var peer string
		if len(cs.PeerCertificates) > 0 {
			peer = cs.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "%s %s alpn=%s version=%x suite=%x complete=%v sni=%s peer=%s chains=%d",
			r.Proto, r.URL.Scheme, cs.NegotiatedProtocol, cs.Version, cs.CipherSuite,
			cs.HandshakeComplete, cs.ServerName, peer, len(cs.VerifiedChains))
	})
}

// The existing TLS tests, with the lean HTTP/2 server on: HTTP/1.1 and
// h2 on one port, certificate reloads under load (a kept-alive h2
// connection among them), mutual TLS, stalled and late handshakes, the
// refusal at the cap (HTTP/1.1 503 within TLS while a lean h2
// connection is busy) and shedding an idle h2 connection.
func TestTLSSuiteOnLeanH2(t *testing.T) {
	t.Run(h2ModeLean, func(t *testing.T) {
		for name, f := range map[string]func(*testing.T){
			"ServesHTTP1AndH2":          TestTLSServesHTTP1AndH2,
			"CertReloadUnderLoad":       TestTLSCertReloadUnderLoad,
			"BadNewCertKeepsOld":        TestTLSBadNewCertKeepsOld,
			"MTLSRefusesClientNoCert":   TestMTLSRefusesClientWithoutCert,
			"StalledHandshakeIsClosed":  TestTLSStalledHandshakeIsClosed,
			"HandshakenConnWaitsIdle":   TestTLSHandshakenConnWaitsIdleTimeout,
			"BusyConnsRefuseNewOne":     TestTLSBusyConnsRefuseNewOne,
			"IdleH2ConnIsShed":          TestTLSIdleH2ConnIsShed,
			"LateHelloIsServed":         TestTLSLateHelloIsServed,
			"LeanServesH2NotHTTP1":      testLeanTLSServesH2NotHTTP1,
			"LeanRequestsSeeTheirTLS":   testLeanTLSRequestsSeeTheirTLS,
			"LeanConnTrackedAndRefuses": testLeanTLSConnTrackedAndRefuses,
		} {
			t.Run(name, f)
		}
	})
}

// With LeanH2, HTTP/2 over TLS is the lean server's and HTTP/1.1 over
// TLS net/http's.
func testLeanTLSServesH2NotHTTP1(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	s, addr := startLeanTLS(t, protoHandler, Limits{}, ca, "")
	if got, err := getBody(tlsClient(ca, false), "https://"+addr+"/"); err != nil || got != "HTTP/1.1" {
		t.Fatalf("HTTP/1.1 over TLS: %q, %v", got, err)
	}
	if n := s.h2.conned.Load(); n != 0 {
		t.Fatalf("an HTTP/1.1 connection reached the lean HTTP/2 server (%d)", n)
	}
	if got, err := getBody(tlsClient(ca, true), "https://"+addr+"/"); err != nil || got != "HTTP/2.0" {
		t.Fatalf("h2 over TLS: %q, %v", got, err)
	}
	if c, n := s.h2.conned.Load(), s.h2.served.Load(); c != 1 || n != 1 {
		t.Fatalf("the lean server served %d streams on %d connections, want 1 on 1", n, c)
	}
}

// A lean request over TLS has r.TLS as net/http's HTTP/2 server gives
// it: the same ALPN, version, suite, server name, and under mutual TLS
// the client's certificate and verified chain (what an authenticating
// gate reads).
func testLeanTLSRequestsSeeTheirTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	clients := testcerts.NewCA(t, "clients")
	pair := ca.Server(t)
	files := TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clients.File}
	_, _, std := startTLSServer(t, tlsStateHandler(), Limits{}, files, nil)
	s, _, lean := startTLSServer(t, tlsStateHandler(), leanH2(Limits{}), files, nil)
	alice := clients.Client(t, "alice").TLS
	for _, path := range []string{"/", "/x?y=1"} {
		want, err := getBody(tlsClient(ca, true, alice), "https://"+std+path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := getBody(tlsClient(ca, true, alice), "https://"+lean+path)
		if err != nil || got != want {
			t.Errorf("%s: lean %q, %v\n net/http %q", path, got, err, want)
		}
	}
	if s.h2.served.Load() == 0 {
		t.Fatal("the lean server served nothing")
	}
}

// A lean TLS connection is tracked as net/http's h2 one is: idle once
// its stream is done, busy while one runs, so at the cap a newcomer
// gets refusalTLS's HTTP/1.1 503, and the slot is freed when the client
// goes.
func testLeanTLSConnTrackedAndRefuses(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	s, addr := startLeanTLS(t, h, Limits{MaxConns: 1}, ca, "")
	c := dialH2TLS(t, ca, addr)
	c.open(t, 1, "GET", "/", true)
	c.until(t, "the answer", func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamEnded() })
	waitIdle(t, s, 1)
	c.open(t, 3, "GET", "/hold", true)
	<-entered
	waitIdle(t, s, 0)
	resp, err := tlsClient(ca, false).Get("https://" + addr + "/")
	if err != nil {
		close(release)
		t.Fatalf("a newcomer at the cap: %v, want a 503", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(release)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Proto != "HTTP/1.1" || !bytes.Contains(body, []byte("connection limit")) {
		t.Errorf("newcomer at the cap: %s %s %q, want HTTP/1.1 503 naming the connection limit", resp.Proto, resp.Status, body)
	}
	if s.h2.conned.Load() != 1 {
		t.Errorf("the busy connection was not the lean server's (%d)", s.h2.conned.Load())
	}
	c.until(t, "the held answer", func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamEnded() })
	waitIdle(t, s, 1)
	c.Close()
	awaitCond(t, "the slot freed", func() bool { return s.conns.openConns() == 0 })
}

// TestH2LeanTLSMatchesNetHTTP: through Go's HTTP/2 client over TLS, the
// lean server answers what net/http's TLS HTTP/2 server answers.
func TestH2LeanTLSMatchesNetHTTP(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	files := TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}
	_, _, std := startTLSServer(t, corpusHandler(), Limits{}, files, nil)
	s, _, lean := startTLSServer(t, corpusHandler(), leanH2(Limits{}), files, nil)
	hs, hl := tlsClient(ca, true), tlsClient(ca, true)
	n := h2SameAnswersThrough(t, "https://"+std, "https://"+lean, func(lean bool) *http.Client {
		if lean {
			return hl
		}
		return hs
	})
	if s.h2.conned.Load() != 1 || s.h2.served.Load() < uint64(n) {
		t.Fatalf("the lean server served %d streams on %d connections, want %d on 1", s.h2.served.Load(), s.h2.conned.Load(), n)
	}
}

// TestH2LeanTLSResetCancelsHandler: a client's RST_STREAM over TLS
// cancels the request's context.
func TestH2LeanTLSResetCancelsHandler(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	canceled, entered := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			close(canceled)
		case <-time.After(hang):
		}
	})
	s, addr := startLeanTLS(t, h, Limits{}, ca, "")
	c := dialH2TLS(t, ca, addr)
	c.open(t, 1, "GET", "/", true)
	<-entered
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case <-canceled:
	case <-time.After(hang):
		t.Fatal("the handler's context was not cancelled by RST_STREAM")
	}
	if s.h2.conned.Load() != 1 {
		t.Fatal("the connection was not the lean server's")
	}
}

// recordingConn keeps every byte the client reads.
type recordingConn struct {
	net.Conn
	mu   sync.Mutex
	read []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read = append(c.read, p[:n]...)
	c.mu.Unlock()
	return n, err
}

// lastRecordType is the content type of the last TLS record read (TLS
// 1.2: an alert's is visible, 21).
func (c *recordingConn) lastRecordType() byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var typ byte
	for b := c.read; len(b) >= 5; {
		n := 5 + (int(b[3])<<8 | int(b[4]))
		if n > len(b) {
			break
		}
		typ, b = b[0], b[n:]
	}
	return typ
}

// TestH2LeanTLSShutdownGoAway: Shutdown sends GOAWAY over TLS at once,
// the running stream gets its whole answer, the server's side then ends
// with a TLS close_notify (a client that, like OpenSSL's, takes a TCP
// close without it for a truncation attack reads a clean end, as from
// net/http's server) before the FIN, and Shutdown returns.
func TestH2LeanTLSShutdownGoAway(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "finished")
	})
	s, addr := startLeanTLS(t, h, Limits{}, ca, "")
	rec := &recordingConn{Conn: dial(t, addr).Conn}
	c := dialH2TLSOver(t, ca, rec, tls.VersionTLS12)
	c.open(t, 1, "GET", "/", true)
	<-entered
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	close(release)
	f := c.until(t, "the answer's DATA", func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok })
	if d := f.(*http2.DataFrame); string(d.Data()) != "finished" {
		t.Fatalf("DATA %q", d.Data())
	}
	c.SetReadDeadline(time.Now().Add(hang))
	for {
		if _, err := c.fr.ReadFrame(); err != nil {
			if err != io.EOF {
				t.Errorf("after the last stream: %v, want EOF", err)
			}
			break
		}
	}
	if typ := rec.lastRecordType(); typ != 21 {
		t.Errorf("the last TLS record has type %d, want 21 (the close_notify alert)", typ)
	}
	if s.h2.conned.Load() != 1 {
		t.Error("the connection was not the lean server's")
	}
	c.Close()
	awaitNoError(t, "Shutdown, once the stream was done,", done)
}

// TestH2LeanTLSCrowdWaitsWithoutHandlers is
// TestH2LeanCrowdWaitsWithoutHandlers over TLS: a crowd on a lean route
// waits in the room as stream records, its parking handlers returned; a
// reset leaves the room; the rest are answered once the slot frees.
func TestH2LeanTLSCrowdWaitsWithoutHandlers(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	leanCrowdWaits(t, func(h http.Handler, lim Limits) (*Server, *rawH2) {
		s, addr := startLeanTLS(t, h, lim, ca, "")
		return s, dialH2TLS(t, ca, addr)
	}, true)
}

// TestH2LeanTLSWritesYieldOnce: over TLS the lean writer yields once
// per flush, as in clear, and the TLS records it writes do not yield
// again in trackedConn.Write (the connection's first bytes, a
// ClientHello, do not mark it h2c).
func TestH2LeanTLSWritesYieldOnce(t *testing.T) {
	const requests, start = 20, 5
	ca := testcerts.NewCA(t, "test")
	s, addr := startLeanTLS(t, okHandler(), Limits{}, ca, "")
	var yields atomic.Int64
	s.conns.yields.gosched = func() { yields.Add(1) }
	hc := tlsClient(ca, true)
	for range requests {
		if a := h2Do(t, hc, "GET", "https://"+addr+"/", nil, false); string(a.body) != "ok\n" {
			t.Fatalf("answer %v", a)
		}
	}
	if y := yields.Load(); y == 0 || y > requests+start {
		t.Fatalf("%d yields for %d requests, want at most one per answer (and a few at the start)", y, requests)
	}
	if s.h2.served.Load() != requests {
		t.Fatalf("the lean server served %d streams", s.h2.served.Load())
	}
}

// heldConn sends its first write (a ClientHello) and holds the later
// ones until flush, so that the handshake's last flight and the first
// request reach the server in one segment, as they may from any client:
// the server's handshake then reads the request into the TLS
// connection's buffer along with the Finished.
type heldConn struct {
	net.Conn
	writes  int
	held    []byte
	flushed bool
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == 1 || c.flushed {
		return c.Conn.Write(p)
	}
	c.held = append(c.held, p...)
	return len(p), nil
}

// flush sends what was held; later writes go through.
func (c *heldConn) flush() error {
	c.flushed = true
	_, err := c.Conn.Write(c.held)
	return err
}

// An HTTP/2 connection whose preface came with the handshake's last
// flight keeps being read after the header timeout: the tracker took its
// first socket read after the handshake for the first request's and set
// the header timeout as a read deadline nobody cleared, so the
// connection died as soon as its client paused that long.
func TestTLSH2PrefaceWithHandshakeNoHeaderDeadline(t *testing.T) {
	bothH2(t, func(t *testing.T) {
		ca := testcerts.NewCA(t, "test")
		pair := ca.Server(t)
		lim := Limits{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 3 * hang}
		_, _, addr := startTLSServer(t, okHandler(), lim, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
		held := &heldConn{Conn: dial(t, addr).Conn}
		c := dialH2TLSOver(t, ca, held, 0)
		if err := held.flush(); err != nil {
			t.Fatal(err)
		}
		// The SETTINGS ack, the first socket read after the handshake.
		c.until(t, "our SETTINGS acked", func(f http2.Frame) bool {
			s, ok := f.(*http2.SettingsFrame)
			return ok && s.IsAck()
		})
		time.Sleep(5 * lim.ReadHeaderTimeout)
		for _, id := range []uint32{1, 3} {
			c.open(t, id, "GET", "/", true)
			f := c.until(t, fmt.Sprintf("stream %d's answer", id), func(f http2.Frame) bool {
				d, ok := f.(*http2.DataFrame)
				return ok && d.StreamEnded()
			})
			if f.Header().StreamID != id {
				t.Fatalf("answer on stream %d", f.Header().StreamID)
			}
			time.Sleep(5 * lim.ReadHeaderTimeout)
		}
	})
}

// An HTTP/1.1 connection whose first request came with the handshake's
// last flight goes idle once answered: net/http ends its background
// read after each request with a deadline in the past, which the
// tracker, taking the connection for one still waiting for its first
// request (the request was read into the TLS buffer, not by a socket
// read it could see), moved to the idle timeout. The connection then
// stayed active that long: a graceful shutdown waited for it, and at
// the cap it could not be shed.
func TestTLSRequestWithHandshakeGoesIdle(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	lim := Limits{IdleTimeout: 3 * hang}
	s, _, addr := startTLSServer(t, okHandler(), lim, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	held := &heldConn{Conn: dial(t, addr).Conn}
	c := tls.Client(held, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(hang))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := held.flush(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitIdle(t, s, 1)
}
