package server

import (
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/surge-run/surge/internal/api"
)

// checkTLS loads the listener's certificate (Config.TLS), so a bad file
// stops the start at once with its name.
func (s *Server) checkTLS() error {
	if !s.cfg.TLS.Enabled() {
		return nil
	}
	if s.cfg.Cluster.enabled() {
		// Nodes forward calls to each other's listeners in clear
		// (internal/cluster), which a TLS listener would refuse.
		return errors.New("--tls-cert with --kafka: cluster nodes call each other's listener without TLS, so a node's listener cannot require it yet; put TLS in front of the nodes (a load balancer) instead")
	}
	r, err := api.NewCertReloader(s.cfg.TLS, s.logger)
	if err != nil {
		return err
	}
	s.certs = r
	s.watchSIGHUP()
	return nil
}

// serve serves on the listener, over TLS if configured.
func (s *Server) serve() {
	if s.certs == nil {
		s.serveErr <- s.srv.Serve(s.ln)
		return
	}
	s.serveErr <- s.srv.ServeTLS(s.ln, s.certs.ServerConfig())
}

// watchSIGHUP reloads the certificate on SIGHUP (errors are logged by
// the reloader). Only a TLS server takes the signal: without TLS, SIGHUP
// keeps its default, ending the process, as before.
func (s *Server) watchSIGHUP() {
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
				s.logger.Info("SIGHUP: reloading the TLS certificate")
				s.certs.Reload()
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
