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
		"Offsets of an owned partition's log past what its state has applied: the log's end offset minus the engine's position, not counting the transaction markers and this node's ownership record (0 when caught up; records of a transaction still being written count).",
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
		lag := lagOf(o.Offset, int64(eng.Position(p)), n.slots[p].marker.Load())
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), strconv.Itoa(p))
	}
}

// lagOf is the lag of a partition whose log ends at end, whose state has
// applied everything before pos, and whose owner's marker record is at
// marker. Every write to the log is transactional, so the last offset of a
// log at rest is a commit control record (not a record the engine
// applies); records the engine never applies also include each owner's
// marker and its commit, which leave the engine's position behind the
// marker when the owner has appended nothing yet.
func lagOf(end, pos, marker int64) int64 {
	base := max(pos, marker+1)
	return max(end-base-1, 0)
}
