package api

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/surge-run/surge/internal/clientconn"
)

// TLS on the listener.
//
// One port serves HTTP/1.1, HTTP/2 (ALPN "h2") and gRPC over TLS. The
// certificate (and the client CA of --tls-client-ca) is read again when
// its files change, looked at on a handshake at most once per
// CertCheckInterval, and on Reload (SIGHUP): renewing a certificate needs
// no restart. A new set that does not load (a key that does not match,
// a file half written) keeps the old one and is logged with the reason.

// CertCheckInterval is how often, at most, a handshake looks at the
// certificate files' size and modification time.
const CertCheckInterval = time.Second

// TLSCipherSuites are the TLS 1.2 suites offered: ECDHE key exchange
// (forward secrecy) with an AEAD cipher only. Go's own default list also
// has CBC suites with SHA-1 MACs, which modern guidance (Mozilla
// "intermediate") drops. TLS 1.3's suites are all AEAD and not
// configurable in Go.
var TLSCipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSFiles name the listener's certificate, its key and, for mutual TLS,
// the CAs whose client certificates are accepted (empty: none asked).
type TLSFiles struct {
	Cert, Key, ClientCA string
}

// Enabled reports whether TLS is asked for.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

func (f TLSFiles) check() error {
	switch {
	case f.Cert == "" && f.Key == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are only asked for over TLS")
	case f.Cert == "":
		return errors.New("--tls-key needs --tls-cert (the certificate the key belongs to)")
	case f.Key == "":
		return errors.New("--tls-cert needs --tls-key (the certificate's private key)")
	}
	return nil
}

// tlsMaterial is one loaded set of the files.
type tlsMaterial struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil without --tls-client-ca
	config    *tls.Config    // what a handshake with this set uses
}

// fileStamp tells a changed file from an unchanged one without reading
// it: a file replaced by a rename has another inode even if its size and
// time (on a coarse clock) are the same.
type fileStamp struct {
	size    int64
	modTime time.Time
	inode   uint64
}

// CertReloader serves the listener's certificate and reloads it.
type CertReloader struct {
	files  TLSFiles
	logger *slog.Logger

	cur       atomic.Pointer[tlsMaterial]
	nextCheck atomic.Int64 // unix nanoseconds of the next look at the files

	mu     sync.Mutex // one reload at a time
	stamps []fileStamp
}

// NewCertReloader loads the files; an error names the file at fault.
func NewCertReloader(files TLSFiles, logger *slog.Logger) (*CertReloader, error) {
	if err := files.check(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &CertReloader{files: files, logger: logger}
	stamps, _ := r.stat()
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.stamps = stamps
	r.cur.Store(m)
	r.nextCheck.Store(time.Now().Add(CertCheckInterval).UnixNano())
	return r, nil
}

func (r *CertReloader) paths() []string {
	p := []string{r.files.Cert, r.files.Key}
	if r.files.ClientCA != "" {
		p = append(p, r.files.ClientCA)
	}
	return p
}

func (r *CertReloader) stat() ([]fileStamp, error) {
	var stamps []fileStamp
	for _, p := range r.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		st := fileStamp{size: fi.Size(), modTime: fi.ModTime()}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			st.inode = sys.Ino
		}
		stamps = append(stamps, st)
	}
	return stamps, nil
}

func (r *CertReloader) load() (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s with --tls-key %s: %w", r.files.Cert, r.files.Key, err)
	}
	m := &tlsMaterial{cert: &cert}
	if r.files.ClientCA != "" {
		if m.clientCAs, err = clientconn.CAPool("--tls-client-ca", r.files.ClientCA); err != nil {
			return nil, err
		}
	}
	m.config = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: TLSCipherSuites,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if m.clientCAs != nil {
		m.config.ClientAuth = tls.RequireAndVerifyClientCert
		m.config.ClientCAs = m.clientCAs
	}
	return m, nil
}

// Reload reads the files again now (SIGHUP). On an error the current set
// stays in use; the error says why.
func (r *CertReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps, _ := r.stat()
	return r.reloadLocked(stamps)
}

func (r *CertReloader) reloadLocked(stamps []fileStamp) error {
	r.stamps = stamps
	m, err := r.load()
	if err != nil {
		r.logger.Error("TLS files not reloaded: still serving the certificate loaded before", "err", err)
		return err
	}
	r.cur.Store(m)
	r.logger.Info("TLS certificate reloaded", "cert", r.files.Cert, "not_after", m.cert.Leaf.NotAfter)
	return nil
}

// maybeReload reloads the files if their size or time changed since the
// last look, at most once per CertCheckInterval; the handshake that finds
// the time due pays for the look.
func (r *CertReloader) maybeReload() {
	now := time.Now().UnixNano()
	due := r.nextCheck.Load()
	if now < due || !r.nextCheck.CompareAndSwap(due, now+int64(CertCheckInterval)) {
		return
	}
	stamps, err := r.stat()
	if err != nil {
		return // a file being replaced; the next look sees it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !equalStamps(stamps, r.stamps) {
		r.reloadLocked(stamps)
	}
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].modTime.Equal(b[i].modTime) || a[i].inode != b[i].inode {
			return false
		}
	}
	return true
}

// Certificate is the certificate handshakes use now.
func (r *CertReloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

// ServerConfig is the listener's TLS configuration: every handshake gets
// the current set of files.
func (r *CertReloader) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: TLSCipherSuites,
		NextProtos:   []string{"h2", "http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			r.maybeReload()
			return r.cur.Load().config, nil
		},
	}
}

// ServeTLS is Serve over TLS with cfg (CertReloader.ServerConfig): the
// connection limits apply as to cleartext connections, the handshake
// counting as the connection's first request (it must end within the
// header timeout of its first byte).
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	if s.err != nil {
		ln.Close()
		return s.err
	}
	s.conns.tlsConfig = cfg
	s.srv.TLSConfig = cfg
	s.srv.Protocols.SetHTTP2(true)
	if s.h2 != nil {
		// HTTP/2 over TLS goes to the lean server (h2_tls.go).
		s.srv.TLSNextProto = s.h2.tlsNextProto()
	}
	// Otherwise ServeTLS adds net/http's h2 server as TLSNextProto; the
	// files are in cfg.
	return s.srv.ServeTLS(&limitListener{Listener: ln, t: s.conns}, "", "")
}

// refusalTLS answers a connection over the cap within TLS, as refuse does
// in clear: a client reads the 503 and its Retry-After. HTTP/1.1 only is
// offered, so an HTTP/2 client falls back to it for this one answer.
func refusalTLS(c net.Conn, cfg *tls.Config) net.Conn {
	one := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: TLSCipherSuites,
		NextProtos:   []string{"http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			base, err := cfg.GetConfigForClient(hello)
			if err != nil || base == nil {
				return base, err
			}
			base = base.Clone()
			base.NextProtos = []string{"http/1.1"}
			return base, nil
		},
	}
	return tls.Server(c, one)
}

// trackedOf is the tracked connection under nc, which net/http hands the
// ConnState hook wrapped in TLS.
func trackedOf(nc net.Conn) (*trackedConn, bool) {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*trackedConn)
	return c, ok
}
