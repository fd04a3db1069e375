package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Member is a node of the cluster as the group describes it.
type Member struct {
	NodeID string `json:"nodeId"`
	Addr   string `json:"addr"`
}

// ownerMap is which node serves which partition, as last read from the
// group (kadm DescribeGroups), corrected at once by what this node itself
// acquires and releases. It is a routing hint: a stale entry costs a
// refused call and a retry, never a wrong answer, since only the node whose
// engine serves a partition answers for it.
type ownerMap struct {
	mu      sync.RWMutex
	owner   []Member // by partition; NodeID "" when unassigned
	members []Member // every node in the group, sorted by NodeID
	read    time.Time
	// reread is closed (and replaced) by every read of the group, which
	// calls in flight wait on to learn whether their node is still in it.
	reread chan struct{}
}

func newOwnerMap(parts int) *ownerMap {
	return &ownerMap{owner: make([]Member, parts), reread: make(chan struct{})}
}

// setRead installs what a read of the group found, and says which nodes
// joined and left the group since the previous read (none on the first).
func (m *ownerMap) setRead(owner, members []Member) (joined, left []string) {
	m.mu.Lock()
	if !m.read.IsZero() {
		joined, left = memberDiff(m.members, members)
	}
	m.owner = owner
	m.members = members
	m.read = time.Now()
	close(m.reread)
	m.reread = make(chan struct{})
	m.mu.Unlock()
	return joined, left
}

// memberDiff is the node ids in now and not in before, and the reverse.
func memberDiff(before, now []Member) (joined, left []string) {
	in := func(ms []Member, id string) bool {
		return slices.ContainsFunc(ms, func(m Member) bool { return m.NodeID == id })
	}
	for _, m := range now {
		if !in(before, m.NodeID) {
			joined = append(joined, m.NodeID)
		}
	}
	for _, m := range before {
		if !in(now, m.NodeID) {
			left = append(left, m.NodeID)
		}
	}
	return joined, left
}

// errLeftGroup is the cause of a call abandoned because its node left the
// group.
var errLeftGroup = errors.New("the node left the cluster's group (it stopped heartbeating, e.g. paused or cut off, or it left) while the call was under way")

// whileMember returns ctx cancelled, with errLeftGroup as its cause, as
// soon as a read of the group made from now on no longer lists node: a
// node the group expelled for silence (paused, cut off) may hold a call
// for ever without refusing it, and its partitions are served elsewhere
// by now. A read during a rebalance still lists every member that has not
// left, so calls to healthy nodes are left alone. Call stop when done.
func (m *ownerMap) whileMember(ctx context.Context, node string) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	m.mu.RLock()
	reread := m.reread
	m.mu.RUnlock()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-reread:
			}
			m.mu.RLock()
			reread = m.reread
			in := slices.ContainsFunc(m.members, func(mem Member) bool { return mem.NodeID == node })
			m.mu.RUnlock()
			if !in {
				cancel(errLeftGroup)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

func (m *ownerMap) assignedTo(p int) (Member, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if p < 0 || p >= len(m.owner) || m.owner[p].NodeID == "" {
		return Member{}, false
	}
	return m.owner[p], true
}

func (m *ownerMap) setLocal(p int, node, addr string) {
	m.mu.Lock()
	m.owner[p] = Member{NodeID: node, Addr: addr}
	m.mu.Unlock()
}

// clearLocal forgets that this node owns p, so that calls for it look for
// the new owner instead of coming back here.
func (m *ownerMap) clearLocal(p int, node string) {
	m.mu.Lock()
	if m.owner[p].NodeID == node {
		m.owner[p] = Member{}
	}
	m.mu.Unlock()
}

func (m *ownerMap) snapshot() (owners, members []Member, read time.Time) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.owner), slices.Clone(m.members), m.read
}

func (m *ownerMap) memberList() []Member {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.members
}

// refreshOwners reads the group's members and their assignments.
func (n *Node) refreshOwners(ctx context.Context) error {
	groups, err := n.adm.DescribeGroups(ctx, n.group)
	if err != nil {
		return fmt.Errorf("describing group %s: %w", n.group, err)
	}
	g, ok := groups[n.group]
	if !ok {
		return fmt.Errorf("group %s not described", n.group)
	}
	if g.Err != nil {
		return fmt.Errorf("describing group %s: %w", n.group, g.Err)
	}
	owner := make([]Member, n.partitions)
	var members []Member
	for _, gm := range g.Members {
		node, addr, ok := parseClientID(gm.ClientID)
		if !ok {
			continue
		}
		mem := Member{NodeID: node, Addr: addr}
		members = append(members, mem)
		c, ok := gm.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range c.Topics {
			if t.Topic != n.topic {
				continue
			}
			for _, p := range t.Partitions {
				if int(p) < len(owner) {
					owner[p] = mem
				}
			}
		}
	}
	slices.SortFunc(members, func(a, b Member) int {
		if a.NodeID < b.NodeID {
			return -1
		}
		if a.NodeID > b.NodeID {
			return 1
		}
		return 0
	})
	members = slices.Compact(members)
	// What this node's engine serves is known for certain here; the group
	// may not show an assignment yet or any more.
	self := Member{NodeID: n.cfg.Log.NodeID, Addr: n.cfg.Advertise}
	if eng := n.engine(); eng != nil {
		for _, p := range eng.Owned() {
			owner[p] = self
		}
	}
	if joined, left := n.owners.setRead(owner, members); len(joined)+len(left) > 0 {
		// Failover timelines start here: when this node saw a member go.
		n.log.Info("the group's members changed", "joined", joined, "left", left, "members", len(members))
	}
	return nil
}

func (n *Node) engine() interface{ Owned() []int } {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.eng == nil {
		return nil
	}
	return n.eng
}

// triggerRefresh asks the refresher to read the group now.
func (n *Node) triggerRefresh() {
	select {
	case n.refresh <- struct{}{}:
	default:
	}
}

// refresher keeps the owner map current: every RefreshEvery, and at once
// when a call found no owner (at most every 50 ms then, since every
// request of a moving partition asks).
func (n *Node) refresher() {
	defer n.bg.Done()
	t := time.NewTicker(n.cfg.RefreshEvery)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		case <-n.refresh:
			if wait := 50*time.Millisecond - time.Since(last); wait > 0 {
				select {
				case <-n.stop:
					return
				case <-time.After(wait):
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.refreshOwners(ctx)
		cancel()
		last = time.Now()
		if err != nil && !errors.Is(err, context.Canceled) {
			n.log.Debug("reading the group's assignments failed", "err", err)
		}
	}
}
