package api

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/testcerts"
)

// startTLSServer serves h over TLS with files on a loopback port until
// the test ends.
func startTLSServer(t *testing.T, h http.Handler, lim Limits, files TLSFiles, logger *slog.Logger) (*Server, *CertReloader, string) {
	t.Helper()
	if inLeanH2Mode(t) {
		lim = leanH2(lim)
	}
	r, err := NewCertReloader(files, logger)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer("127.0.0.1:0", h, lim, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.ServeTLS(ln, r.ServerConfig()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	})
	return s, r, ln.Addr().String()
}

// protoHandler answers the protocol the request came over, and whether
// over TLS.
var protoHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil {
		http.Error(w, "not TLS", http.StatusInternalServerError)
		return
	}
	io.WriteString(w, r.Proto)
})

// tlsClient trusts ca and speaks HTTP/2 (ALPN) if h2, else HTTP/1.1.
func tlsClient(ca *testcerts.CA, h2 bool, certs ...tls.Certificate) *http.Client {
	p := new(http.Protocols)
	p.SetHTTP2(h2)
	p.SetHTTP1(!h2)
	return &http.Client{Timeout: hang, Transport: &http.Transport{
		Protocols:       p,
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs},
	}}
}

func getBody(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status + ": " + string(b))
	}
	return string(b), err
}

// One TLS port serves HTTP/1.1 and HTTP/2 (by ALPN), and offers neither
// TLS below 1.2 nor a TLS 1.2 suite outside TLSCipherSuites.
func TestTLSServesHTTP1AndH2(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	_, _, addr := startTLSServer(t, protoHandler, Limits{}, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	for h2, want := range map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"} {
		got, err := getBody(tlsClient(ca, h2), "https://"+addr+"/")
		if err != nil || got != want {
			t.Errorf("h2 %v: %q, %v; want %q", h2, got, err, want)
		}
	}
	old := &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}
	if c, err := tls.Dial("tcp", addr, old); err == nil {
		c.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
	weak := &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}}
	if c, err := tls.Dial("tcp", addr, weak); err == nil {
		c.Close()
		t.Error("a handshake with only CBC-SHA1 suites succeeded")
	}
	// A cleartext client is refused, not served in clear.
	resp, err := http.Get("http://" + addr + "/")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("cleartext request served: %s", body)
		}
	}
}

// servedSerial is the serial of the certificate a new handshake gets.
func servedSerial(t *testing.T, ca *testcerts.CA, addr string) *big.Int {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: hang}, "tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// Replacing the certificate files while a client makes requests in a
// loop (each on a new connection, so each handshakes, and others on one
// kept-alive HTTP/2 connection) fails no request, and new handshakes get
// the new certificate without a restart or a signal.
func TestTLSCertReloadUnderLoad(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	first, second := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	files := TLSFiles{Cert: dir + "/cert.pem", Key: dir + "/key.pem"}
	first.Install(t, files.Cert, files.Key)
	_, _, addr := startTLSServer(t, protoHandler, Limits{}, files, nil)
	if got := servedSerial(t, ca, addr); got.Cmp(first.Serial) != 0 {
		t.Fatalf("serial %v served, want the first certificate's %v", got, first.Serial)
	}

	var stop atomic.Bool
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	loop := func(c *http.Client, closeEach bool) {
		defer wg.Done()
		for !stop.Load() {
			if _, err := getBody(c, "https://"+addr+"/"); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			} else {
				served.Add(1)
			}
			if closeEach {
				c.CloseIdleConnections()
			}
		}
	}
	wg.Add(3)
	go loop(tlsClient(ca, false), true)
	go loop(tlsClient(ca, true), true)
	go loop(tlsClient(ca, true), false)

	second.Install(t, files.Cert, files.Key)
	deadline := time.Now().Add(30 * time.Second)
	for servedSerial(t, ca, addr).Cmp(second.Serial) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("new handshakes still get the old certificate 30 s after the files changed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := served.Load()
	for served.Load() < before+20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the reload; first: %v", n, n+served.Load(), firstErr.Load())
	}
}

// A new certificate that does not load (a key that is not its key)
// keeps the old one in use, and the log says why; Reload (SIGHUP) with
// good files then takes them.
func TestTLSBadNewCertKeepsOld(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	first, second, third := ca.Server(t), ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	files := TLSFiles{Cert: dir + "/cert.pem", Key: dir + "/key.pem"}
	first.Install(t, files.Cert, files.Key)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	_, r, addr := startTLSServer(t, protoHandler, Limits{}, files, logger)

	// The second certificate with the third's key.
	mixed := testcerts.Pair{CertFile: second.CertFile, KeyFile: third.KeyFile}
	mixed.Install(t, files.Cert, files.Key)
	err := r.Reload()
	if err == nil || !strings.Contains(err.Error(), files.Cert) {
		t.Fatalf("Reload of a mismatched pair: %v, want an error naming %s", err, files.Cert)
	}
	if got := servedSerial(t, ca, addr); got.Cmp(first.Serial) != 0 {
		t.Errorf("serial %v served after a bad reload, want the old %v", got, first.Serial)
	}
	if !strings.Contains(logs.String(), "TLS files not reloaded") || !strings.Contains(logs.String(), "private key does not match public key") {
		t.Errorf("log does not say why the files were not reloaded:\n%s", logs.String())
	}
	// Half written: the check on handshake finds it and keeps the old.
	if err := os.WriteFile(files.Cert, []byte("-----BEGIN CERTIFICATE-----\nMIIB"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(CertCheckInterval + 100*time.Millisecond)
	if got := servedSerial(t, ca, addr); got.Cmp(first.Serial) != 0 {
		t.Errorf("serial %v served with a truncated file, want the old %v", got, first.Serial)
	}
	third.Install(t, files.Cert, files.Key)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, ca, addr); got.Cmp(third.Serial) != 0 {
		t.Errorf("serial %v served after a good reload, want %v", got, third.Serial)
	}
}

// With a client CA, a client without a certificate, or with one another
// CA signed, is refused; one with a certificate the CA signed is served.
func TestMTLSRefusesClientWithoutCert(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	clients := testcerts.NewCA(t, "clients")
	other := testcerts.NewCA(t, "other")
	pair := ca.Server(t)
	_, _, addr := startTLSServer(t, protoHandler, Limits{}, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clients.File}, nil)
	url := "https://" + addr + "/"
	for _, h2 := range []bool{false, true} {
		if _, err := getBody(tlsClient(ca, h2), url); err == nil {
			t.Errorf("h2 %v: a client without a certificate was served", h2)
		}
		if _, err := getBody(tlsClient(ca, h2, other.Client(t, "mallory").TLS), url); err == nil {
			t.Errorf("h2 %v: a client with a certificate of another CA was served", h2)
		}
		if _, err := getBody(tlsClient(ca, h2, clients.Client(t, "alice").TLS), url); err != nil {
			t.Errorf("h2 %v: a client with a good certificate: %v", h2, err)
		}
	}
}

// A bad file at start is an error that names it.
func TestNewCertReloaderNamesBadFile(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	garbage := t.TempDir() + "/garbage.pem"
	os.WriteFile(garbage, []byte("not a certificate"), 0o600)
	missing := t.TempDir() + "/missing.pem"
	for _, c := range []struct {
		files TLSFiles
		name  string
	}{
		{TLSFiles{Cert: missing, Key: pair.KeyFile}, missing},
		{TLSFiles{Cert: garbage, Key: pair.KeyFile}, garbage},
		{TLSFiles{Cert: pair.CertFile, Key: garbage}, garbage},
		{TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: garbage}, garbage},
		{TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: missing}, missing},
		{TLSFiles{Cert: pair.CertFile}, "--tls-key"},
		{TLSFiles{Key: pair.KeyFile}, "--tls-cert"},
		{TLSFiles{ClientCA: ca.File}, "--tls-cert"},
	} {
		_, err := NewCertReloader(c.files, nil)
		if err == nil || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%+v: %v, want an error naming %s", c.files, err, c.name)
		}
	}
}

// A client that starts a handshake and stalls is closed once the header
// timeout has run from its first byte: a slow handshake cannot hold a
// connection forever.
func TestTLSStalledHandshakeIsClosed(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	lim := Limits{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	s, _, addr := startTLSServer(t, protoHandler, lim, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	c := dial(t, addr)
	// The first bytes of a ClientHello record, and no more.
	if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x01, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(hang))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("the stalled handshake's connection was not closed: %v", err)
	}
	waitFor(t, func() bool { return s.conns.openConns() == 0 })
}

// A TLS connection whose handshake is done waits for its first request
// as long as a kept-alive one waits for its next (the idle timeout), not
// just the header timeout, as a cleartext one does: an HTTPS client's
// pool keeps connections it dialed for later.
func TestTLSHandshakenConnWaitsIdleTimeout(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	lim := Limits{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: hang}
	_, _, addr := startTLSServer(t, protoHandler, lim, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(5 * lim.ReadHeaderTimeout)
	c.SetDeadline(time.Now().Add(hang))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("request after the header timeout on a handshaken connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// At the connection cap, with every connection busy, a new TLS client
// gets the 503 and its Retry-After within TLS, not bytes in clear.
func TestTLSBusyConnsRefuseNewOne(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
	})
	_, _, addr := startTLSServer(t, h, Limits{MaxConns: 1}, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	busy := tlsClient(ca, true)
	go func() {
		if resp, err := busy.Get("https://" + addr + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	defer close(release)
	// A client offering HTTP/2 and HTTP/1.1 (browsers, curl) gets the
	// answer over HTTP/1.1; one offering HTTP/2 only (gRPC) fails the
	// handshake at once, as an h2c one fails on the answer in clear.
	both := tlsClient(ca, true)
	both.Transport.(*http.Transport).Protocols.SetHTTP1(true)
	for h2, c := range map[bool]*http.Client{false: tlsClient(ca, false), true: both} {
		resp, err := c.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("h2 %v: refused connection: %v, want a 503", h2, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !bytes.Contains(body, []byte("connection limit")) {
			t.Errorf("h2 %v: %s %q (Retry-After %q), want 503 naming the connection limit", h2, resp.Status, body, resp.Header.Get("Retry-After"))
		}
	}
	if _, err := tlsClient(ca, true).Get("https://" + addr + "/"); err == nil || !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("HTTP/2-only client at the cap: %v, want a failed handshake", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An idle HTTP/2 connection over TLS is tracked like an h2c one: at the
// cap, a new connection takes its place.
func TestTLSIdleH2ConnIsShed(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	s, _, addr := startTLSServer(t, protoHandler, Limits{MaxConns: 1}, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	first := tlsClient(ca, true)
	if got, err := getBody(first, "https://"+addr+"/"); err != nil || got != "HTTP/2.0" {
		t.Fatalf("first connection: %q, %v", got, err)
	}
	waitIdle(t, s, 1)
	// The idle connection is shed for the new one. An h2 client may have
	// sent a control frame (a window update) the server has not read yet
	// on a busy machine: a connection with bytes unread is not shed, and
	// the newcomer is refused until the server has read them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := getBody(tlsClient(ca, true), "https://"+addr+"/")
		if err == nil && got == "HTTP/2.0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connection at the cap, the other idle: %q, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A new connection has the idle timeout to start its handshake, as a
// cleartext one has to send its first request: the handshake's
// deadlines, the server's writes included, run from the hello.
func TestTLSLateHelloIsServed(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	lim := Limits{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: hang}
	_, _, addr := startTLSServer(t, protoHandler, lim, TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	raw := dial(t, addr)
	time.Sleep(5 * lim.ReadHeaderTimeout)
	c := tls.Client(raw.Conn, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(hang))
	if err := c.Handshake(); err != nil {
		t.Fatalf("handshake started after the header timeout: %v", err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d", resp.StatusCode)
	}
}
