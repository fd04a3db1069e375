// Package cluster makes a surge process one node of a cluster on Apache
// Kafka: it joins the cluster's consumer group to learn which partitions
// this node serves (acquiring and releasing them in the engine), keeps a
// map of which node serves which partition, and carries the engine's
// forwarded requests to their owners over HTTP.
//
// The group client never consumes: the log topic's partitions are only the
// tokens the group balances. Each partition's records are read by the
// engine through kafkalog when it acquires the partition.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
)

// Config configures a node.
type Config struct {
	// Log is the Kafka log's configuration: brokers, cluster name, node
	// id, partition count for creating the topics, replication,
	// retention. Its Logger and Metrics are used as given.
	Log kafkalog.Config
	// Advertise is the host:port other nodes reach this node's HTTP
	// listener at.
	Advertise string
	// Secret is the cluster secret: calls to other nodes are signed with
	// it, and calls not signed with it are refused (auth.go). Empty: calls
	// are neither signed nor checked.
	Secret []byte
	// CallTLS, if set, makes calls to other nodes go over https with it
	// (for nodes whose listener serves TLS); nil: plain http.
	CallTLS *tls.Config
	// SessionTimeout is how long the group waits for a silent node before
	// moving its partitions. Default 6 s.
	SessionTimeout time.Duration
	// RefreshEvery is how often the owner map is read from the group.
	// Default 1 s.
	RefreshEvery time.Duration
	// NewPartitions is the partition count of a new cluster when
	// Log.Partitions is 0 (an existing cluster keeps its own).
	NewPartitions int
	// Registerer, if set, gets the cluster's metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Defaults for the zero values of Config.
const (
	DefaultSessionTimeout = 6 * time.Second
	DefaultRefreshEvery   = time.Second
	// openParallel bounds the partitions opened and restored at once: each
	// replays its log, and a node that takes over many at once would
	// otherwise fetch them all together.
	openParallel = 4
	// A node heartbeats this many times per session timeout. The
	// survivors of a failed node learn that the group rebalances only
	// from their next heartbeat, so a failover takes from the session
	// timeout less one interval (the failed node's last heartbeat came
	// just before it failed) to the session timeout plus one (the
	// survivors' came just before it was expelled); and a node whose
	// heartbeats are delayed (a saturated machine) has that many tries
	// before it is expelled. A heartbeat is one small request.
	heartbeatsPerSession = 10
	minHeartbeat         = 100 * time.Millisecond
	// Retry pauses after a failed acquire or a lost log.
	minRetryPause = 250 * time.Millisecond
	maxRetryPause = 10 * time.Second
)

// Node is this process's membership in a cluster.
type Node struct {
	cfg        Config
	log        *slog.Logger
	group      string
	topic      string
	partitions int
	adm        *kadm.Client
	admCl      *kgo.Client
	snaps      *kafkalog.Snapshots
	transport  *transport
	owners     *ownerMap

	mu     sync.Mutex
	eng    *engine.Engine
	gcl    *kgo.Client
	slots  []*slot
	closed bool

	// leaving is set once Leave starts; lastCall is when a forwarded
	// call last arrived (Unix ns), for Drain.
	leaving  atomic.Bool
	lastCall atomic.Int64

	lagCache lagCache // Lags (lag.go)

	// verify checks incoming calls' signatures (nil without a secret);
	// refusedLog and sendLog space the lines about refused calls.
	verify     *verifier
	refusedLog rateLog
	sendLog    rateLog

	sem     chan struct{}
	stop    chan struct{}
	bg      sync.WaitGroup
	refresh chan struct{}
}

// slot is one partition's ownership on this node. mu serialises opening
// and releasing it; want (guarded by Node.mu) is whether the group assigns
// it here.
type slot struct {
	mu     sync.Mutex
	want   bool
	cancel context.CancelFunc // cancels an acquire under way
	gen    uint64             // bumped by each assignment and revocation
	// marker is the ownership marker's offset in the log this node
	// opened last (for the lag metric); -1 before any.
	marker atomic.Int64
}

// New checks the configuration, creates the cluster's topics if they are
// missing (with Log.Partitions partitions) and opens the snapshot store.
// It does not join the group: Join does, once the engine exists.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	admCl, err := cfg.Log.NewClient(kgo.ClientID(clientID(cfg.Log.NodeID, cfg.Advertise) + "/admin"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	adm := kadm.NewClient(admCl)
	parts, err := ensureTopics(ctx, adm, &cfg)
	if err != nil {
		admCl.Close()
		return nil, err
	}
	snaps, err := kafkalog.OpenSnapshots(ctx, cfg.Log)
	if err != nil {
		admCl.Close()
		return nil, err
	}
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.With("cluster", cfg.Log.Cluster, "node", cfg.Log.NodeID),
		group:      GroupName(cfg.Log.Cluster),
		topic:      cfg.Log.LogTopic(),
		partitions: parts,
		adm:        adm,
		admCl:      admCl,
		snaps:      snaps,
		owners:     newOwnerMap(parts),
		sem:        make(chan struct{}, openParallel),
		stop:       make(chan struct{}),
		refresh:    make(chan struct{}, 1),
	}
	n.slots = make([]*slot, parts)
	for i := range n.slots {
		n.slots[i] = &slot{}
		n.slots[i].marker.Store(-1)
	}
	n.transport = newTransport(n)
	if len(cfg.Secret) > 0 {
		n.verify = newVerifier(cfg.Secret)
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(&collector{n: n})
	}
	return n, nil
}

// fillDefaults puts the default in every setting left zero and checks
// the ones that have none.
func (cfg *Config) fillDefaults() error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Log.Logger == nil {
		cfg.Log.Logger = cfg.Logger
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.RefreshEvery <= 0 {
		cfg.RefreshEvery = DefaultRefreshEvery
	}
	if len(cfg.Log.Brokers) == 0 {
		return errors.New("cluster: no Kafka brokers given")
	}
	if cfg.Log.Cluster == "" {
		return errors.New("cluster: no cluster name given")
	}
	if cfg.Log.NodeID == "" || strings.Contains(cfg.Log.NodeID, "/") {
		return fmt.Errorf("cluster: node id %q: must be non-empty and contain no '/'", cfg.Log.NodeID)
	}
	if _, _, err := net.SplitHostPort(cfg.Advertise); err != nil {
		return fmt.Errorf("cluster: advertise address %q: %w (want host:port)", cfg.Advertise, err)
	}
	if err := CheckSecret(cfg.Secret); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// ensureTopics creates the cluster's topics if they are missing, a new
// log with NewPartitions partitions unless Log.Partitions says otherwise,
// and sets Log.Partitions to the log's partition count, which it returns.
func ensureTopics(ctx context.Context, adm *kadm.Client, cfg *Config) (int, error) {
	if cfg.Log.Partitions == 0 {
		have, err := existingPartitions(ctx, adm, cfg.Log.LogTopic())
		if err != nil {
			return 0, err
		}
		if have == 0 {
			cfg.Log.Partitions = cfg.NewPartitions
		}
	}
	parts, err := kafkalog.EnsureTopics(ctx, adm, cfg.Log)
	if err != nil {
		return 0, err
	}
	cfg.Log.Partitions = parts
	return parts, nil
}

// existingPartitions is the partition count of topic, 0 if it does not
// exist.
func existingPartitions(ctx context.Context, adm *kadm.Client, topic string) (int, error) {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("cluster: describing topic %s: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok || d.Err != nil {
		return 0, nil
	}
	return len(d.Partitions), nil
}

// GroupName is the consumer group the nodes of cluster share.
func GroupName(cluster string) string { return "surge." + cluster }

// clientID carries the node's id and address to the other nodes through
// the group's member descriptions.
func clientID(node, advertise string) string { return "surge/" + node + "/" + advertise }

// parseClientID undoes clientID; ok is false for clients that are not
// surge nodes.
func parseClientID(id string) (node, addr string, ok bool) {
	rest, ok := strings.CutPrefix(id, "surge/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// Partitions is the cluster's partition count (the log topic's).
func (n *Node) Partitions() int { return n.partitions }

// Snapshots is the store the engine keeps its snapshots in.
func (n *Node) Snapshots() engine.SnapshotStore { return n.snaps }

// EngineCluster is what the engine needs to be this node's engine.
func (n *Node) EngineCluster() *engine.Cluster {
	return &engine.Cluster{Transport: n.transport, OnLost: n.onLost}
}

// NodeID is this node's id.
func (n *Node) NodeID() string { return n.cfg.Log.NodeID }

// Join joins the cluster's group: from now on the group assigns this node
// partitions, which it acquires in eng. The HTTP handler (Handler) must
// already be serving, since other nodes forward requests as soon as they
// see this node own a partition.
func (n *Node) Join(eng *engine.Engine) error {
	pctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	err := n.checkPeers(pctx)
	cancel()
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gcl != nil || n.closed {
		return errors.New("cluster: Join called twice or after Close")
	}
	n.eng = eng
	hb := max(n.cfg.SessionTimeout/heartbeatsPerSession, minHeartbeat)
	gcl, err := n.cfg.Log.NewClient(
		kgo.ClientID(clientID(n.cfg.Log.NodeID, n.cfg.Advertise)),
		kgo.ConsumerGroup(n.group),
		kgo.ConsumeTopics(n.topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(n.cfg.SessionTimeout),
		kgo.HeartbeatInterval(hb),
		// Callbacks return at once (acquiring runs beside them) except
		// revocations, which wait for the hand-over snapshot.
		kgo.RebalanceTimeout(max(30*time.Second, 2*n.cfg.SessionTimeout)),
		kgo.DisableAutoCommit(),
		// Never consumed (the topic is paused below); should a fetch
		// slip in before the pause, it starts at the end and is small.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxBytes(1<<10),
		kgo.FetchMaxPartitionBytes(1<<10),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { n.assigned(m[n.topic]) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { n.revoked(m[n.topic], "revoked") }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { n.revoked(m[n.topic], "lost") }),
		kgo.WithLogger(kafkalog.KgoLogger(n.log, "kafka group: ")),
	)
	if err != nil {
		return fmt.Errorf("cluster: joining group %s: %w", n.group, err)
	}
	// The group only balances the topic's partitions among the nodes: the
	// records are read by each partition's log, never by this client.
	gcl.PauseFetchTopics(n.topic)
	n.gcl = gcl
	n.bg.Add(1)
	go n.refresher()
	n.log.Info("joined the cluster's group", "group", n.group, "partitions", n.partitions, "advertise", n.cfg.Advertise)
	return nil
}

// Leave leaves the group, which revokes this node's partitions: each is
// released (writing its hand-over snapshot) before the group gives it to
// another node. Requests for them are forwarded from then on.
func (n *Node) Leave(ctx context.Context) error {
	n.mu.Lock()
	gcl := n.gcl
	n.mu.Unlock()
	if gcl == nil {
		return nil
	}
	n.leaving.Store(true)
	err := gcl.LeaveGroupContext(ctx)
	// Whatever the group did, nothing here may keep serving: a partition
	// this node still held would be fenced by its next owner anyway.
	n.mu.Lock()
	for _, s := range n.slots {
		s.want = false
		s.gen++
		if s.cancel != nil {
			s.cancel()
		}
	}
	n.mu.Unlock()
	n.releaseAll()
	return err
}

// Drain waits, after Leave, until the other nodes stop calling this one
// (they learn the new owners within a refresh), at most until ctx ends or
// twice the refresh interval passes; the listener can then close without
// cutting calls in flight.
func (n *Node) Drain(ctx context.Context) {
	quiet := n.cfg.RefreshEvery / 2
	limit := time.Now().Add(2 * n.cfg.RefreshEvery)
	for time.Now().Before(limit) {
		since := time.Since(time.Unix(0, n.lastCall.Load()))
		if since >= quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(quiet - since):
		}
	}
}

// Close stops the node's clients. Call Leave first, then close the engine,
// then Close.
func (n *Node) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	gcl := n.gcl
	for _, s := range n.slots {
		if s.cancel != nil {
			s.cancel()
		}
	}
	n.mu.Unlock()
	close(n.stop)
	n.bg.Wait()
	if gcl != nil {
		gcl.Close()
	}
	n.transport.close()
	n.snaps.Close()
	n.admCl.Close()
}

func (n *Node) releaseAll() {
	var wg sync.WaitGroup
	for p := range n.slots {
		wg.Go(func() { n.release(p, "leaving") })
	}
	wg.Wait()
}

// assigned starts acquiring the partitions the group gave this node. It
// returns at once: restoring a partition can take longer than the group
// lets a rebalance callback run, and heartbeats go on meanwhile.
func (n *Node) assigned(parts []int32) {
	// Every rebalance ends here, even one that gives this node nothing
	// (franz-go calls it regardless): the group changed, so read it now,
	// not at the next tick, to route to the new owners and to abandon
	// calls to a node the group expelled.
	n.triggerRefresh()
	if len(parts) == 0 {
		return
	}
	n.log.Info("partitions assigned", "partitions", parts)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range parts {
		if int(p) >= len(n.slots) {
			n.log.Error("the group assigned a partition beyond the cluster's count; the log topic was changed by hand", "partition", p, "partitions", n.partitions)
			continue
		}
		s := n.slots[p]
		s.want = true
		s.gen++
		n.startAcquire(int(p), s, 0)
	}
}

// startAcquire runs acquire on its own goroutine after pause. n.mu held.
func (n *Node) startAcquire(p int, s *slot, pause time.Duration) {
	if n.closed {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	gen := s.gen
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		defer cancel()
		n.acquire(ctx, p, s, gen, pause)
	}()
}

// acquire opens partition p's log (fencing its earlier owners) and makes
// the engine serve it, retrying with backoff while the group still assigns
// p here.
func (n *Node) acquire(ctx context.Context, p int, s *slot, gen uint64, pause time.Duration) {
	for {
		if pause > 0 {
			select {
			case <-ctx.Done():
				return
			case <-n.stop:
				return
			case <-time.After(pause):
			}
		}
		pause = min(max(2*pause, minRetryPause), maxRetryPause)
		select {
		case n.sem <- struct{}{}:
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		}
		err, done := n.acquireOnce(ctx, p, s, gen)
		<-n.sem
		if done || ctx.Err() != nil {
			// Acquired, or no longer wanted (revoked while opening, which
			// cooperative rebalancing does as nodes join).
			return
		}
		n.log.Warn("acquiring a partition failed; retrying", "partition", p, "retry_in", pause, "err", err)
	}
}

// acquireOnce makes one attempt; done is true when there is nothing more
// to do (acquired, or no longer wanted).
func (n *Node) acquireOnce(ctx context.Context, p int, s *slot, gen uint64) (err error, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !n.stillWanted(s, gen) || ctx.Err() != nil {
		return nil, true
	}
	if n.eng.Serves(p) {
		return nil, true
	}
	lg, err := kafkalog.Open(ctx, n.cfg.Log, p)
	if err != nil {
		return err, false
	}
	if !n.stillWanted(s, gen) {
		// Revoked while opening: this node fenced the partition's owner
		// for nothing. Its next owner opens it again.
		lg.Close()
		return nil, true
	}
	if err := n.eng.Acquire(p, lg); err != nil {
		if errors.Is(err, engine.ErrClosed) {
			return nil, true
		}
		return err, false
	}
	s.marker.Store(lg.Marker())
	n.owners.setLocal(p, n.cfg.Log.NodeID, n.cfg.Advertise)
	return nil, true
}

func (n *Node) stillWanted(s *slot, gen uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.want && s.gen == gen && !n.closed
}

// revoked releases the partitions the group took from this node. It
// returns once they are released: only then may the group give them to
// another node, which would otherwise fence this one mid-snapshot.
func (n *Node) revoked(parts []int32, why string) {
	if len(parts) == 0 {
		return
	}
	n.log.Info("partitions "+why, "partitions", parts)
	n.mu.Lock()
	for _, p := range parts {
		if int(p) >= len(n.slots) {
			continue
		}
		s := n.slots[p]
		s.want = false
		s.gen++
		if s.cancel != nil {
			s.cancel()
		}
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range parts {
		if int(p) < len(n.slots) {
			wg.Go(func() { n.release(int(p), why) })
		}
	}
	wg.Wait()
	n.triggerRefresh()
}

func (n *Node) release(p int, why string) {
	s := n.slots[p]
	s.mu.Lock()
	defer s.mu.Unlock()
	n.owners.clearLocal(p, n.cfg.Log.NodeID)
	if n.eng == nil {
		return
	}
	if err := n.eng.Release(p); err != nil {
		n.log.Warn("releasing a partition reported an error", "partition", p, "why", why, "err", err)
	}
}

// onLost is the engine telling that partition p's log failed (fenced by a
// newer owner, or Kafka failed) and p is no longer served. If the group
// still assigns p here, the log is opened again after a pause, once the
// group's view confirms it: a node fenced by a newer owner would otherwise
// fence that owner in turn until its own revocation arrived.
func (n *Node) onLost(p int, err error) {
	n.log.Warn("partition lost by its log; will serve it again if the group still assigns it here", "partition", p, "err", err)
	n.owners.clearLocal(p, n.cfg.Log.NodeID)
	n.triggerRefresh()
	n.mu.Lock()
	defer n.mu.Unlock()
	if p < 0 || p >= len(n.slots) || n.closed {
		return
	}
	s := n.slots[p]
	if !s.want {
		return
	}
	s.gen++
	n.startAcquireConfirmed(p, s)
}

// startAcquireConfirmed waits until the group's member descriptions say p
// is assigned here (or p stops being wanted), then acquires. n.mu held.
func (n *Node) startAcquireConfirmed(p int, s *slot) {
	if s.cancel != nil {
		s.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	gen := s.gen
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		defer cancel()
		pause := minRetryPause
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.stop:
				return
			case <-time.After(pause):
			}
			if !n.stillWanted(s, gen) {
				return
			}
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			err := n.refreshOwners(rctx)
			rcancel()
			if err == nil {
				if o, ok := n.owners.assignedTo(p); ok && o.NodeID == n.cfg.Log.NodeID {
					n.acquire(ctx, p, s, gen, 0)
					return
				}
			}
			pause = min(2*pause, maxRetryPause)
		}
	}()
}
