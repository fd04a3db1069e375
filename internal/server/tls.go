package server

import (
	"crypto/tls"
	"os"
	"os/signal"
	"syscall"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/clientconn"
)

// checkTLS loads the listener's certificate (Config.TLS), so a bad file
// stops the start at once with its name.
func (s *Server) checkTLS() error {
	if !s.cfg.TLS.Enabled() {
		return nil
	}
	r, err := api.NewCertReloader(s.cfg.TLS, s.logger)
	if err != nil {
		return err
	}
	s.certs = r
	if s.cfg.Cluster.enabled() {
		// The other nodes' listeners serve TLS too: calls to them go
		// over https.
		if s.cfg.Cluster.CallTLS, err = s.nodeCallTLS(); err != nil {
			return err
		}
	}
	return nil
}

// nodeCallTLS is how a node of a TLS cluster calls the others: it trusts
// --cluster-ca (default: --tls-client-ca, else the system's CAs) and,
// where a listener asks for a client certificate (--tls-client-ca), shows
// its own, reloaded with it.
func (s *Server) nodeCallTLS() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: api.TLSCipherSuites}
	flag, file := "--cluster-ca", s.cfg.Cluster.CA
	if file == "" {
		flag, file = "--tls-client-ca", s.cfg.TLS.ClientCA
	}
	if file != "" {
		pool, err := clientconn.CAPool(flag, file)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return s.certs.Certificate(), nil
	}
	return cfg, nil
}

// serve serves on the listener, over TLS if configured.
func (s *Server) serve() {
	if s.certs == nil {
		s.serveErr <- s.srv.Serve(s.ln)
		return
	}
	s.serveErr <- s.srv.ServeTLS(s.ln, s.certs.ServerConfig())
}

// watchSIGHUP reloads the certificate and the tokens on SIGHUP (errors
// are logged). Only a server with TLS or reloadable tokens takes the
// signal: otherwise SIGHUP keeps its default, ending the process, as
// before.
func (s *Server) watchSIGHUP() {
	if s.certs == nil && s.cfg.Auth.Reload == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	s.undo = append(s.undo, func() {
		signal.Stop(hup)
		close(done)
	})
	go func() {
		for {
			select {
			case <-hup:
				s.logger.Info("SIGHUP: reloading the TLS certificate and the tokens")
				s.ReloadTLS()
				s.ReloadTokens()
			case <-done:
				return
			}
		}
	}()
}

// ReloadTLS reads the certificate files again, as SIGHUP does; without
// TLS it does nothing.
func (s *Server) ReloadTLS() error {
	if s.certs == nil {
		return nil
	}
	return s.certs.Reload()
}
