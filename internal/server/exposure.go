package server

import (
	"fmt"
	"net"
	"net/netip"
)

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
