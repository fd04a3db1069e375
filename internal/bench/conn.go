package bench

import (
	"context"
	"crypto/tls"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/surge-run/surge/internal/clientconn"
)

// How the bench reaches a server over TLS (--ca-file) and with a token
// (--token): a --target at an https:// URL, or a started server given
// --serve-flag=--tls-cert=... (its base URL is then https://). The
// do-nothing server stays in clear, so a baseline is the ceiling of
// cleartext HTTP.

// connKey carries the run's clientconn.Options in its context, so that
// every request the bench makes (health checks, scrapes of /metrics, the
// load) reaches a TLS server and carries the token.
type connKey struct{}

func withConn(ctx context.Context, c clientconn.Options) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

func connOf(ctx context.Context) clientconn.Options {
	c, _ := ctx.Value(connKey{}).(clientconn.Options)
	return c
}

// checkConn loads --ca-file once, so a bad file stops the bench before
// any server starts.
func checkConn(c clientconn.Options) error {
	_, err := clientconn.TLSConfig(c.CAFile)
	return err
}

// clientTLS is the TLS configuration of the bench's clients; checkConn
// has checked the file.
func clientTLS(c clientconn.Options) *tls.Config {
	cfg, err := clientconn.TLSConfig(c.CAFile)
	if err != nil {
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return cfg
}

// connTransport readies tr for both schemes: h2 is cleartext HTTP/2
// (h2c) for http:// and HTTP/2 by ALPN for https://; otherwise HTTP/1.1
// for both. It adds the token.
func connTransport(tr *http.Transport, h2 bool, c clientconn.Options) http.RoundTripper {
	p := new(http.Protocols)
	if h2 {
		p.SetUnencryptedHTTP2(true)
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	tr.Protocols = p
	tr.TLSClientConfig = clientTLS(c)
	return clientconn.WithToken(tr, c.Token)
}

// oneOffClient is for the bench's own requests (health checks, scrapes).
func oneOffClient(ctx context.Context, timeout time.Duration) *http.Client {
	c := connOf(ctx)
	tr := &http.Transport{TLSClientConfig: clientTLS(c), ForceAttemptHTTP2: true}
	return &http.Client{Timeout: timeout, Transport: clientconn.WithToken(tr, c.Token)}
}

// servesTLS reports whether `surge serve` args turn TLS on.
func servesTLS(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return a == "--tls-cert" || strings.HasPrefix(a, "--tls-cert=")
	})
}
