package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/server"
)

// The cluster secret and the Kafka password come from the environment or
// a file, never a flag; the secret is given once.
func TestClusterSecrets(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-the-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envKafkaPassword, "pw")
	cc := server.ClusterConfig{SecretFile: file}
	if err := clusterSecrets(&cc); err != nil || string(cc.Secret) != "from-the-file-0123456789" || cc.KafkaSecurity.Password != "pw" {
		t.Errorf("from a file: %v, secret %q, password %q", err, cc.Secret, cc.KafkaSecurity.Password)
	}
	t.Setenv(envClusterSecret, "from-the-env-0123456789")
	if err := clusterSecrets(&cc); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("in both the env and a file: %v", err)
	}
	cc = server.ClusterConfig{}
	if err := clusterSecrets(&cc); err != nil || string(cc.Secret) != "from-the-env-0123456789" {
		t.Errorf("from the env: %v, secret %q", err, cc.Secret)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	os.Unsetenv(envClusterSecret)
	if err := clusterSecrets(&server.ClusterConfig{SecretFile: empty}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty file: %v", err)
	}
}

func TestClusterSecurityFlags(t *testing.T) {
	cmd := newServeCmd()
	for _, f := range []string{"cluster-secret-file", "kafka-tls", "kafka-ca", "kafka-sasl", "kafka-user"} {
		if cmd.Flags().Lookup(f) == nil {
			t.Errorf("surge serve has no --%s", f)
		}
	}
	for _, f := range []string{"cluster-secret", "kafka-password"} {
		if cmd.Flags().Lookup(f) != nil {
			t.Errorf("surge serve takes a secret on the command line: --%s", f)
		}
	}
}
