// Package api holds the HTTP listener shared by every workload: one port that
// speaks HTTP/1.1 and cleartext HTTP/2 (h2c, prior knowledge), with limits
// set so a slow or hostile client cannot hold resources forever.
package api

import (
	"net/http"
	"time"
)

// MaxHeaderBytes bounds request headers; bodies are bounded per route.
const MaxHeaderBytes = 64 << 10

// NewServer returns an *http.Server that serves h on addr over HTTP/1.1 and
// h2c. The caller runs ListenAndServe / Serve and Shutdown.
func NewServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		// Whole-request limits, so a client that trickles a body or never
		// reads its answer cannot hold a handler forever. For HTTP/1.1 they
		// restart with every request on a kept-alive connection; for HTTP/2
		// they apply per stream, so long-lived h2c connections are fine.
		ReadTimeout:    30 * time.Second,
		WriteTimeout:   30 * time.Second,
		IdleTimeout:    120 * time.Second,
		MaxHeaderBytes: MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			// The spike test multiplexes thousands of requests over a few
			// connections; the default of 250 streams would queue them.
			MaxConcurrentStreams: 4096,
		},
	}
}
