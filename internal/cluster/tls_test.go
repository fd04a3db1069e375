package cluster_test

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/testcerts"
)

// Nodes whose listeners serve TLS with client certificates required
// (--tls-cert, --tls-client-ca) call each other over https, showing their
// own certificates: reservations made through every node, most of them
// forwarded, read back the same through every node.
func TestClusterOverTLS(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "tls")
	ca := testcerts.NewCA(t, "cluster")
	client := ca.Client(t, "tester")
	saved := httpc.Transport
	httpc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}}}
	defer func() { httpc.Transport = saved }()
	var nodes []*testNode
	for _, id := range []string{"a", "b"} {
		pair := ca.Node(t, id)
		nodes = append(nodes, startNodeWith(t, brokers, name, id, 2*time.Second, func(cfg *server.Config) {
			cfg.TLS = api.TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: ca.File}
			cfg.Cluster.Secret = clusterSecret
		}))
	}
	waitDivided(t, nodes)
	createEvent(t, nodes[0])
	made := map[string]reservation{}
	reserveMany(t, nodes, "tls", 0, 40, made)
	if len(made) != 40 {
		t.Fatalf("%d of 40 reservations made", len(made))
	}
	readBack(t, nodes, made)
}
