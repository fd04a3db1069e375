package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
)

// ClusterConfig is what `surge serve --kafka ...` adds: with Kafka set the
// server is one node of a cluster (docs/CLUSTER.md) and has no data
// directory.
type ClusterConfig struct {
	// Kafka is the bootstrap brokers, host:port[,host:port...].
	Kafka string
	// Cluster names the cluster; its topics and group derive from it.
	Cluster string
	// NodeID names this node; default hostname-port.
	NodeID string
	// Advertise is where the other nodes reach this one; default Addr
	// (127.0.0.1 when Addr has no host).
	Advertise      string
	Replication    int
	SessionTimeout time.Duration
	LogRetention   time.Duration
	// MinCycle is the shortest time between two transactions of a
	// partition (kafkalog.Config.MinCycle); 0 for the default, negative
	// for none.
	MinCycle time.Duration
	// Secret is the cluster secret (SURGE_CLUSTER_SECRET, or read from
	// SecretFile): nodes sign their calls to each other with it. Empty:
	// calls are not signed, as before it existed.
	Secret     []byte
	SecretFile string
	// KafkaSecurity is TLS and SASL towards the brokers.
	KafkaSecurity kafkalog.Security
	// CallTLS, if set, is the client TLS configuration for calls to the
	// other nodes, whose listeners then serve TLS (see cluster.Config).
	// With Config.TLS the server makes it (nodeCallTLS).
	CallTLS *tls.Config
	// CA is the PEM file of the CAs that sign the other nodes'
	// certificates (--cluster-ca), for a cluster whose listeners serve
	// TLS; empty: --tls-client-ca, else the system's.
	CA string
}

func (c ClusterConfig) enabled() bool { return c.Kafka != "" }

// resolve fills the defaults that depend on the listen address.
func (c ClusterConfig) resolve(addr string, logger *slog.Logger) (ClusterConfig, error) {
	if c.Cluster == "" {
		return c, fmt.Errorf("--kafka needs --cluster (SURGE_CLUSTER): the name the cluster's nodes share")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return c, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if c.Advertise == "" {
		if host == "" || host == "0.0.0.0" || host == "::" {
			logger.Warn("--addr has no host that other nodes can reach; advertising 127.0.0.1, which only works for nodes on this machine: set --advertise (SURGE_ADVERTISE)", "addr", addr)
			host = "127.0.0.1"
		}
		c.Advertise = net.JoinHostPort(host, port)
	}
	if _, _, err := net.SplitHostPort(c.Advertise); err != nil {
		return c, fmt.Errorf("--advertise %q: %w (want HOST:PORT)", c.Advertise, err)
	}
	if c.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "node"
		}
		_, aport, _ := net.SplitHostPort(c.Advertise)
		c.NodeID = h + "-" + aport
	}
	if strings.Contains(c.NodeID, "/") {
		return c, fmt.Errorf("--node-id %q: must not contain '/'", c.NodeID)
	}
	if c.Replication < 0 {
		return c, fmt.Errorf("--kafka-replication %d: must be positive", c.Replication)
	}
	if c.SessionTimeout < 0 || c.LogRetention < 0 {
		return c, fmt.Errorf("--kafka-session-timeout and --kafka-log-retention must be positive durations")
	}
	if err := c.KafkaSecurity.Check(); err != nil {
		return c, err
	}
	if err := cluster.CheckSecret(c.Secret); err != nil {
		return c, err
	}
	if len(c.Secret) == 0 {
		logger.Warn("no cluster secret (SURGE_CLUSTER_SECRET or --cluster-secret-file): calls between nodes are not authenticated, so anyone who reaches this node's port can apply commands through " + cluster.CallPath)
	}
	return c, nil
}

// advertisePort replaces a port 0 in advertise (tests listen on port 0)
// with the port the listener got.
func advertisePort(advertise string, ln net.Listener) string {
	host, port, err := net.SplitHostPort(advertise)
	if err != nil || port != "0" {
		return advertise
	}
	_, got, _ := net.SplitHostPort(ln.Addr().String())
	return net.JoinHostPort(host, got)
}

// openCluster creates the cluster's topics if needed and returns this
// node, not yet in the group.
func openCluster(ctx context.Context, cfg Config, cc ClusterConfig, logger *slog.Logger, reg prometheus.Registerer) (*cluster.Node, error) {
	if cfg.Partitions < 0 {
		return nil, fmt.Errorf("--partitions %d: must be positive (or 0: the cluster's count, %d for a new cluster)", cfg.Partitions, engine.DefaultPartitions)
	}
	var brokers []string
	for _, b := range strings.Split(cc.Kafka, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	node, err := cluster.New(octx, cluster.Config{
		Log: kafkalog.Config{
			Brokers:      brokers,
			Cluster:      cc.Cluster,
			NodeID:       cc.NodeID,
			Partitions:   cfg.Partitions,
			Replication:  cc.Replication,
			LogRetention: cc.LogRetention,
			MinCycle:     cc.MinCycle,
			Security:     cc.KafkaSecurity,
			Metrics:      kafkalog.NewMetrics(reg),
			Logger:       logger,
		},
		NewPartitions:  engine.DefaultPartitions,
		Advertise:      cc.Advertise,
		Secret:         cc.Secret,
		CallTLS:        cc.CallTLS,
		SessionTimeout: cc.SessionTimeout,
		Registerer:     reg,
		Logger:         logger,
	})
	if err != nil {
		return nil, fmt.Errorf("joining cluster %q at %s (%s): %w", cc.Cluster, cc.Kafka, cc.KafkaSecurity, cc.KafkaSecurity.Explain(err))
	}
	return node, nil
}

// mountCluster serves the calls other nodes forward and the cluster status.
func mountCluster(mux *http.ServeMux, m *api.Metrics, node *cluster.Node, eng *engine.Engine) {
	mux.Handle(cluster.CallPath, node.Handler(eng))
	m.Handle(mux, "GET /v1/cluster", func(w http.ResponseWriter, r *http.Request) int {
		b, err := json.Marshal(node.Status())
		if err != nil {
			return api.Error(w, http.StatusInternalServerError, err.Error())
		}
		api.Write(w, http.StatusOK, true, append(b, '\n'))
		return http.StatusOK
	})
}

// ownedLine is the second line of /healthz in cluster mode.
func ownedLine(node *cluster.Node) string {
	owned := node.Owned()
	s := make([]string, len(owned))
	for i, p := range owned {
		s[i] = strconv.Itoa(p)
	}
	return "partitions: " + strings.Join(s, ",") + "\n"
}
