package kafkalog

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/surge-run/surge/internal/kafkatest"
)

func TestSecurityCheck(t *testing.T) {
	for _, c := range []struct {
		s    Security
		want string
	}{
		{Security{SASL: "gssapi", User: "u", Password: "p"}, "want plain"},
		{Security{SASL: SASLScramSHA256, User: "u"}, "SURGE_KAFKA_PASSWORD"},
		{Security{SASL: SASLPlain, Password: "p"}, "--kafka-user"},
		{Security{User: "u"}, "needs --kafka-sasl"},
		{Security{CAFile: "/ca.pem"}, "needs --kafka-tls"},
		{Security{TLS: true, CAFile: "/nonexistent/ca.pem"}, "--kafka-ca"},
	} {
		_, err := c.s.ClientOpts()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.s, err, c.want)
		}
	}
	if s := (Security{SASL: SASLPlain, User: "u", Password: "hunter2"}).String(); strings.Contains(s, "hunter2") {
		t.Errorf("String shows the password: %s", s)
	}
}

// secureCluster is testCluster on the broker's SASL_SSL listener with
// mechanism mech.
func secureCluster(t *testing.T, mech string) Config {
	t.Helper()
	sec := kafkatest.SecureBrokers(t)
	return Config{
		Brokers:    strings.Split(sec.Brokers, ","),
		Cluster:    kafkatest.Topic(t, "kls"),
		NodeID:     "node-a",
		Partitions: 2,
		TxnTimeout: 5 * time.Second,
		Security:   Security{TLS: true, CAFile: sec.CAFile, SASL: mech, User: sec.User, Password: sec.Password},
	}
}

// Every mechanism gets through the SASL_SSL listener; with SCRAM-SHA-512
// the whole path a node takes (topics, the transactional log, snapshots)
// runs over it.
func TestSASLSSL(t *testing.T) {
	for _, mech := range []string{SASLPlain, SASLScramSHA256} {
		cfg := secureCluster(t, mech)
		cl, err := cfg.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Ping(ctxT(t)); err != nil {
			t.Errorf("%s: %v", mech, cfg.Security.Explain(err))
		}
		cl.Close()
	}
	cfg := secureCluster(t, SASLScramSHA512)
	cl, err := cfg.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := EnsureTopics(ctxT(t), kadm.NewClient(cl), cfg); err != nil {
		t.Fatalf("creating topics over SASL_SSL: %v", cfg.Security.Explain(err))
	}
	l, err := Open(ctxT(t), cfg, 1)
	if err != nil {
		t.Fatalf("opening the log over SASL_SSL: %v", err)
	}
	l.Close()
	s, err := OpenSnapshots(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("opening the snapshots over SASL_SSL: %v", err)
	}
	s.Close()
}

// A wrong password and an untrusted broker certificate fail with an
// error that names the setting to fix.
func TestSASLSSLRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Security)
		want string
	}{
		{"wrong password", func(s *Security) { s.Password += "x" }, "SURGE_KAFKA_PASSWORD"},
		{"unknown CA", func(s *Security) { s.CAFile = "" }, "--kafka-ca"},
	} {
		cfg := secureCluster(t, SASLScramSHA256)
		c.edit(&cfg.Security)
		cl, err := cfg.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = cl.Ping(ctx)
		cancel()
		cl.Close()
		if err != nil {
			t.Logf("%s: %v", c.name, cfg.Security.Explain(err))
		}
		if err == nil || !strings.Contains(cfg.Security.Explain(err).Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
}
