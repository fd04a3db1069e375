package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Status is what GET /v1/cluster reports.
type Status struct {
	Cluster    string `json:"cluster"`
	NodeID     string `json:"nodeId"`
	Advertise  string `json:"advertise"`
	Partitions int    `json:"partitions"`
	// Owned lists the partitions this node's engine serves.
	Owned []int `json:"owned"`
	// Owners maps each partition with a known owner to it (the group's
	// assignment as last read, and this node's own partitions).
	Owners map[string]Member `json:"owners"`
	// Members lists the nodes in the group.
	Members []Member `json:"members"`
	// OwnersReadAt is when the group was last read successfully.
	OwnersReadAt time.Time `json:"ownersReadAt"`
}

// Status reports this node's view of the cluster.
func (n *Node) Status() Status {
	owners, members, read := n.owners.snapshot()
	st := Status{
		Cluster:      n.cfg.Log.Cluster,
		NodeID:       n.cfg.Log.NodeID,
		Advertise:    n.cfg.Advertise,
		Partitions:   n.partitions,
		Owned:        []int{},
		Owners:       map[string]Member{},
		Members:      members,
		OwnersReadAt: read,
	}
	if st.Members == nil {
		st.Members = []Member{}
	}
	if eng := n.engine(); eng != nil {
		if o := eng.Owned(); o != nil {
			st.Owned = o
		}
	}
	for p, m := range owners {
		if m.NodeID != "" {
			st.Owners[strconv.Itoa(p)] = m
		}
	}
	return st
}

// Owned lists the partitions this node serves.
func (n *Node) Owned() []int {
	if eng := n.engine(); eng != nil {
		return eng.Owned()
	}
	return nil
}

// collector exports the cluster's gauges at scrape time.
type collector struct{ n *Node }

var (
	lagDesc = prometheus.NewDesc("surge_kafka_consumer_lag",
		"Log records of an owned partition not yet applied here: the log topic's end offset minus the engine's position. Each committed transaction leaves a marker offset, so a caught-up partition shows 1.",
		[]string{"partition"}, nil)
	membersDesc = prometheus.NewDesc("surge_cluster_members",
		"Nodes in the cluster's group, as last read.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagDesc
	ch <- membersDesc
}

// lagTimeout keeps a scrape answering when Kafka is slow: the lag is then
// missing from that scrape rather than the whole scrape late.
const lagTimeout = 2 * time.Second

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(len(n.owners.memberList())))
	n.mu.Lock()
	eng := n.eng
	n.mu.Unlock()
	if eng == nil {
		return
	}
	owned := eng.Owned()
	if len(owned) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	ends, err := n.adm.ListEndOffsets(ctx, n.topic)
	if err != nil {
		n.log.Debug("listing end offsets for the lag metric failed", "err", err)
		return
	}
	for _, p := range owned {
		o, ok := ends.Lookup(n.topic, int32(p))
		if !ok || o.Err != nil {
			continue
		}
		lag := max(o.Offset-int64(eng.Position(p)), 0)
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), strconv.Itoa(p))
	}
}
