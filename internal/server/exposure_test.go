package server

import "testing"

func TestBeyondLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":        false,
		"127.0.0.2:8080":        false,
		"[::1]:8080":            false,
		"[::ffff:127.0.0.1]:80": false,
		"localhost:8080":        false,
		":8080":                 true,
		"0.0.0.0:8080":          true,
		"[::]:8080":             true,
		"10.1.2.3:8080":         true,
		"[2001:db8::1]:8080":    true,
	} {
		got, err := beyondLoopback(addr)
		if err != nil || got != want {
			t.Errorf("beyondLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := beyondLoopback("no-port"); err == nil {
		t.Error("an address without a port was taken")
	}
}
