// Package testcerts makes certificates for tests of TLS: a CA, and
// server and client certificates it signs, written as PEM files. Nothing
// is kept in the repository.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a certificate authority for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA's certificate as a PEM file (for --ca-file and
	// --tls-client-ca).
	File string
}

// NewCA makes a CA whose certificate is written in t's temp dir.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, File: filepath.Join(t.TempDir(), name+"-ca.pem")}
	write(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Pool is a pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Pair is a signed certificate and its key, as PEM files and as a
// tls.Certificate.
type Pair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
	Serial            *big.Int
}

// Server signs a certificate for 127.0.0.1 and localhost.
func (ca *CA) Server(t testing.TB) Pair {
	t.Helper()
	return ca.sign(t, "server", x509.ExtKeyUsageServerAuth)
}

// Client signs a client certificate for mutual TLS.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.sign(t, name, x509.ExtKeyUsageClientAuth)
}

// Node signs a certificate a cluster node both serves with and presents
// to the other nodes' listeners when they ask for one.
func (ca *CA) Node(t testing.TB, name string) Pair {
	t.Helper()
	return ca.sign(t, name, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) sign(t testing.TB, name string, usage ...x509.ExtKeyUsage) Pair {
	key := newKey(t)
	sn := big.NewInt(serial.Add(1))
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := Pair{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), Serial: sn}
	write(t, p.CertFile, "CERTIFICATE", der)
	write(t, p.KeyFile, "PRIVATE KEY", kder)
	if p.TLS, err = tls.LoadX509KeyPair(p.CertFile, p.KeyFile); err != nil {
		t.Fatal(err)
	}
	return p
}

// Install replaces the files at certFile and keyFile with p's, each by a
// rename, as certificate tools do.
func (p Pair) Install(t testing.TB, certFile, keyFile string) {
	t.Helper()
	for _, f := range [][2]string{{p.CertFile, certFile}, {p.KeyFile, keyFile}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		tmp := f[1] + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f[1]); err != nil {
			t.Fatal(err)
		}
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func write(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteCert writes a DER certificate as a PEM file.
func WriteCert(t testing.TB, path string, der []byte) {
	t.Helper()
	write(t, path, "CERTIFICATE", der)
}
