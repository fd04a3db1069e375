package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// checkExposure refuses to serve beyond this machine what anyone who can
// reach the port could then do anything with: off loopback the listener
// needs TLS and tokens, and a cluster node its cluster secret, unless the
// operator passed --insecure, which is logged as a warning. On loopback
// the server may run open, as the two-command start does.
func (s *Server) checkExposure() error {
	if err := s.checkExposed("--addr", s.cfg.Addr); err != nil || s.cfg.GRPCAddr == "" {
		return err
	}
	// The gRPC listener serves the same calls with the same TLS and
	// tokens, so it is held to the same rule.
	return s.checkExposed("--grpc-addr", s.cfg.GRPCAddr)
}

func (s *Server) checkExposed(flag, addr string) error {
	beyond, err := beyondLoopback(addr)
	if err != nil && flag != "--addr" {
		return fmt.Errorf("%s %q: %w", flag, addr, errors.Unwrap(err))
	}
	if err != nil || !beyond {
		return err
	}
	var missing []string
	if !s.cfg.TLS.Enabled() {
		missing = append(missing, "TLS (--tls-cert, --tls-key)")
	}
	if s.cfg.Auth.Tokens == nil {
		missing = append(missing, "tokens (--tokens, or SURGE_ADMIN_TOKEN)")
	}
	if s.cfg.Cluster.enabled() && len(s.cfg.Cluster.Secret) == 0 {
		missing = append(missing, "cluster secret (SURGE_CLUSTER_SECRET or --cluster-secret-file)")
	}
	if len(missing) == 0 {
		return nil
	}
	what := strings.Join(missing, ", ")
	if s.cfg.Insecure {
		s.logger.Warn("INSECURE (--insecure): serving an address other machines can reach without "+what+": anyone who reaches it can read and change everything", "addr", addr)
		return nil
	}
	return fmt.Errorf("%s %s can be reached from other machines, and this server has no %s: configure them (docs/SECURITY.md), listen on 127.0.0.1, or pass --insecure to serve it open anyway", flag, addr, what)
}

// beyondLoopback reports whether a listener on addr (HOST:PORT) can be
// reached from other machines: an empty or unspecified host listens on
// every interface, a name counts by every address it resolves to, and
// only loopback addresses stay on this machine.
func beyondLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if host == "" {
		return true, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return !ip.Unmap().IsLoopback(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return false, fmt.Errorf("--addr %q: resolving %q: %w", addr, host, err)
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return true, nil
		}
	}
	return len(ips) == 0, nil
}
