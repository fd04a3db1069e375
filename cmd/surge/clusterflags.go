package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/surge-run/surge/internal/server"
)

// Secrets of cluster mode come from the environment (or a file), never
// from a flag's value: flags show in ps.
const (
	envClusterSecret = "SURGE_CLUSTER_SECRET"
	envKafkaPassword = "SURGE_KAFKA_PASSWORD"
)

// stringBoolFlags is what the cluster's security flags are defined on
// (cobra's flag set).
type stringBoolFlags interface {
	StringVar(p *string, name string, value string, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// clusterSecurityFlags defines how a node authenticates to the other
// nodes and to Kafka (docs/CLUSTER.md, "Security").
func clusterSecurityFlags(f stringBoolFlags, env *envVars, cc *server.ClusterConfig) {
	f.StringVar(&cc.SecretFile, "cluster-secret-file", "", env.help("cluster-secret-file", "SURGE_CLUSTER_SECRET_FILE", "with --kafka: a file holding the secret every node of the cluster shares (or set it in "+envClusterSecret+"); nodes sign each call to another node with it and refuse calls not signed with it"))
	f.StringVar(&cc.CA, "cluster-ca", "", env.help("cluster-ca", "SURGE_CLUSTER_CA", "with --kafka and --tls-cert: PEM file of the CAs that sign the other nodes' certificates, which calls between nodes check; default --tls-client-ca, else the system's"))
	f.BoolVar(&cc.KafkaSecurity.TLS, "kafka-tls", false, env.help("kafka-tls", "SURGE_KAFKA_TLS", "with --kafka: connect to the brokers over TLS (1.2+)"))
	f.StringVar(&cc.KafkaSecurity.CAFile, "kafka-ca", "", env.help("kafka-ca", "SURGE_KAFKA_CA", "with --kafka-tls: PEM file of the CAs that sign the brokers' certificates; default the system's"))
	f.StringVar(&cc.KafkaSecurity.SASL, "kafka-sasl", "", env.help("kafka-sasl", "SURGE_KAFKA_SASL", "with --kafka: SASL mechanism, plain, scram-sha-256 or scram-sha-512; the user is --kafka-user and the password comes from "+envKafkaPassword))
	f.StringVar(&cc.KafkaSecurity.User, "kafka-user", "", env.help("kafka-user", "SURGE_KAFKA_USER", "with --kafka-sasl: the SASL user"))
}

// clusterSecrets reads the cluster secret and Kafka password, which no flag
// carries, into cc.
func clusterSecrets(cc *server.ClusterConfig) error {
	cc.KafkaSecurity.Password = os.Getenv(envKafkaPassword)
	s, inEnv := os.LookupEnv(envClusterSecret)
	if inEnv && cc.SecretFile != "" {
		return fmt.Errorf("the cluster secret is given twice, in %s and --cluster-secret-file: keep one", envClusterSecret)
	}
	if cc.SecretFile != "" {
		b, err := os.ReadFile(cc.SecretFile)
		if err != nil {
			return fmt.Errorf("--cluster-secret-file: %w", err)
		}
		s = strings.TrimSpace(string(b))
		if s == "" {
			return fmt.Errorf("--cluster-secret-file %s is empty", cc.SecretFile)
		}
	}
	cc.Secret = []byte(s)
	return nil
}
