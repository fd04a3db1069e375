package kafkalog

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/surge-run/surge/internal/clientconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms Security.SASL accepts (--kafka-sasl).
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// Security is how a node's Kafka clients reach the brokers: in clear text
// (the zero value), over TLS, with SASL, or both (SASL_SSL).
type Security struct {
	// TLS turns TLS on; CAFile, if set, is a PEM file of the CAs to trust
	// instead of the system's.
	TLS    bool
	CAFile string
	// SASL is one of SASLPlain, SASLScramSHA256, SASLScramSHA512, or ""
	// for none; User and Password are its credentials.
	SASL     string
	User     string
	Password string
}

// Check tells what is wrong with s, naming the flag to change.
func (s Security) Check() error {
	switch strings.ToLower(s.SASL) {
	case "":
		if s.User != "" {
			return fmt.Errorf("--kafka-user %q needs --kafka-sasl (%s, %s or %s)", s.User, SASLPlain, SASLScramSHA256, SASLScramSHA512)
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.User == "" || s.Password == "" {
			return fmt.Errorf("--kafka-sasl %s needs --kafka-user (SURGE_KAFKA_USER) and the password in SURGE_KAFKA_PASSWORD", s.SASL)
		}
	default:
		return fmt.Errorf("--kafka-sasl %q: want %s, %s or %s", s.SASL, SASLPlain, SASLScramSHA256, SASLScramSHA512)
	}
	if s.CAFile != "" && !s.TLS {
		return fmt.Errorf("--kafka-ca %s needs --kafka-tls", s.CAFile)
	}
	return nil
}

// ClientOpts are the franz-go options that make a client use s; every
// Kafka client a node makes takes them.
func (s Security) ClientOpts() ([]kgo.Opt, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS {
		cfg, err := s.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if m := s.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (s Security) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.CAFile == "" {
		return cfg, nil
	}
	pool, err := clientconn.CAPool("--kafka-ca", s.CAFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = pool
	return cfg, nil
}

func (s Security) mechanism() sasl.Mechanism {
	switch strings.ToLower(s.SASL) {
	case SASLPlain:
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}

// String describes s without its password, for logs and errors.
func (s Security) String() string {
	parts := []string{"plaintext"}
	if s.TLS {
		parts[0] = "tls"
	}
	if s.SASL != "" {
		parts = append(parts, "sasl "+strings.ToLower(s.SASL)+" user "+s.User)
	}
	return strings.Join(parts, ", ")
}

// Explain adds to err, when it is the brokers refusing s's credentials or
// certificate, which setting to fix.
func (s Security) Explain(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("the brokers refused the credentials of user %q with SASL %s: check --kafka-user (SURGE_KAFKA_USER) and SURGE_KAFKA_PASSWORD: %w", s.User, s.SASL, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("the brokers do not accept SASL %s (--kafka-sasl): %w", s.SASL, err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("the broker's certificate is not signed by a CA this node trusts: give its CA with --kafka-ca (SURGE_KAFKA_CA): %w", err)
	case errors.As(err, &badHost):
		return fmt.Errorf("the broker's certificate is not for the address in --kafka: %w", err)
	}
	return err
}
