package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// probeTimeout bounds Join's check of one member; a member that does not
// answer in time is not counted against this node (it may be dead).
const probeTimeout = 5 * time.Second

// selfClaim is HeaderNode's value for this node's calls.
func (n *Node) selfClaim() string { return n.cfg.Log.NodeID + "/" + n.cfg.Advertise }

// answerProbe proves to a probing node that this node holds the secret
// its probe was signed with (nothing to prove without one).
func (h *callHandler) answerProbe(w http.ResponseWriter, signed authHeader) {
	if h.n.verify != nil {
		w.Header().Set(HeaderAuth, probeAnswerMAC(h.n.cfg.Secret, signed.nonce, h.n.selfClaim()))
		w.Header().Set(HeaderNode, h.n.selfClaim())
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkPeers sends a signed probe to every other member of the group
// before this node joins it, and fails if one of them does not share this
// node's cluster secret: a node that cannot call the others, or whom the
// others cannot call, must not take partitions. Members that do not
// answer are skipped.
func (n *Node) checkPeers(ctx context.Context) error {
	groups, err := n.adm.DescribeGroups(ctx, n.group)
	for err != nil && ctx.Err() == nil {
		// A broker's group coordinator may not be ready yet.
		time.Sleep(minRetryPause)
		groups, err = n.adm.DescribeGroups(ctx, n.group)
	}
	if err != nil {
		return fmt.Errorf("cluster: reading the members of group %s to check their cluster secret: %w", n.group, err)
	}
	var (
		members []Member
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
	)
	for _, gm := range groups[n.group].Members {
		id, addr, ok := parseClientID(gm.ClientID)
		if ok && id != n.cfg.Log.NodeID {
			members = append(members, Member{NodeID: id, Addr: addr})
		}
	}
	for _, m := range members {
		wg.Go(func() {
			if err := n.probe(ctx, m); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// probe checks that m shares this node's secret; nil if it does or cannot
// be reached.
func (n *Node) probe(ctx context.Context, m Member) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.transport.url(m.Addr), http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set(HeaderCluster, n.cfg.Log.Cluster)
	req.Header.Set(HeaderProbe, "1")
	signed, err := sign(req, n.cfg.Secret, n.cfg.Log.Cluster, n.selfClaim(), nil, time.Now())
	if err != nil {
		return err
	}
	resp, err := n.transport.client.Do(req)
	if err != nil {
		n.log.Warn("could not check a member's cluster secret; joining anyway", "member", m.NodeID, "addr", m.Addr, "err", err)
		return nil
	}
	defer resp.Body.Close()
	var msg strings.Builder
	buf := make([]byte, 512)
	k, _ := resp.Body.Read(buf)
	msg.Write(buf[:k])
	switch {
	case resp.StatusCode == http.StatusUnauthorized && len(n.cfg.Secret) == 0:
		return fmt.Errorf("cluster: node %s at %s requires calls signed with a cluster secret and this node has none: set SURGE_CLUSTER_SECRET or --cluster-secret-file (%s)", m.NodeID, m.Addr, strings.TrimSpace(msg.String()))
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("cluster: node %s at %s refused this node's cluster secret: %s", m.NodeID, m.Addr, strings.TrimSpace(msg.String()))
	case resp.StatusCode != http.StatusNoContent:
		n.log.Warn("a member answered the secret check unexpectedly; joining anyway", "member", m.NodeID, "addr", m.Addr, "status", resp.StatusCode)
		return nil
	}
	if len(n.cfg.Secret) == 0 {
		return nil
	}
	if got := resp.Header.Get(HeaderAuth); got != probeAnswerMAC(n.cfg.Secret, signed.nonce, resp.Header.Get(HeaderNode)) || got == "" {
		return fmt.Errorf("cluster: node %s at %s: %w", m.NodeID, m.Addr, errProbeUnsigned)
	}
	return nil
}
