// Package clientconn is what Surge's own clients (surge ctl, worker,
// bench, client/jobclient) share to reach a server: cleartext HTTP/2
// (h2c) for http:// URLs as `surge serve` listens by default, TLS with
// HTTP/2 by ALPN for https:// ones, a CA file to trust, and a bearer
// token on every request.
package clientconn

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
)

// Options are a client's --ca-file and --token.
type Options struct {
	// CAFile is a PEM file of the CAs that sign the server's
	// certificate; empty trusts the system's.
	CAFile string
	// Token, if set, is sent as Authorization: Bearer on every request.
	Token string
}

// TLSConfig is the client side of TLS: 1.2 at least, the server checked
// against CAFile's CAs (or the system's).
func TLSConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pool, err := CAPool("--ca-file", caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// CAPool reads the PEM CA certificates in file, given by flag: errors
// name both, and a file holding no certificate is one (a pool trusting
// nothing would refuse every peer with a message that hides why).
func CAPool(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, file)
	}
	return pool, nil
}

// IsHTTPS reports whether base is an https:// URL; it is an error for it
// to be neither http:// nor https://.
func IsHTTPS(base string) (bool, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false, fmt.Errorf("%q: want a URL such as http://127.0.0.1:8080 or https://host:8443", base)
	}
	return u.Scheme == "https", nil
}

// Configure readies tr for base: for https, TLS with o.CAFile and HTTP/2
// (ALPN) or HTTP/1.1, replacing the cleartext protocols tr was given
// (h2c or HTTP/1.1), whose choice http2 (true for HTTP/2) keeps; for
// http, tr as it is. It returns tr, with the token if any.
func Configure(tr *http.Transport, base string, http2 bool, o Options) (http.RoundTripper, error) {
	https, err := IsHTTPS(base)
	if err != nil {
		return nil, err
	}
	if https {
		if tr.TLSClientConfig, err = TLSConfig(o.CAFile); err != nil {
			return nil, err
		}
		p := new(http.Protocols)
		p.SetHTTP2(http2)
		p.SetHTTP1(!http2)
		tr.Protocols = p
	} else if o.CAFile != "" {
		return nil, fmt.Errorf("--ca-file %s is for https:// servers, and %s is http://", o.CAFile, base)
	}
	return WithToken(tr, o.Token), nil
}

// WithToken sends token as Authorization: Bearer on every request rt
// makes; an empty token leaves rt as it is.
func WithToken(rt http.RoundTripper, token string) http.RoundTripper {
	if token == "" {
		return rt
	}
	return bearer{rt: rt, value: "Bearer " + token}
}

type bearer struct {
	rt    http.RoundTripper
	value string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	// A RoundTripper must not change the caller's request.
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.value)
	return b.rt.RoundTrip(r)
}

// CloseIdleConnections passes through, so http.Client.CloseIdleConnections
// reaches the transport.
func (b bearer) CloseIdleConnections() {
	if c, ok := b.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
