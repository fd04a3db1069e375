package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/surge-run/surge/internal/engine"
)

// CallPath is where a node receives the requests other nodes forward. Only
// cluster nodes may reach it: it executes any command it is given.
const CallPath = "/internal/cluster/v1/call"

// HeaderCluster names the cluster a forwarded request belongs to, so that a
// node of another cluster (a reused address) refuses it instead of
// applying it to the wrong data.
const HeaderCluster = "Surge-Cluster"

// MaxCallBytes bounds a forwarded request's body and its answer. The
// engine splits what it sends into bodies of at most
// engine.MaxRemoteBytes, so one command of the largest legal size always
// goes through; the rest is room for answers (query replies).
const MaxCallBytes = 2 * engine.MaxRemoteBytes

// transport carries the engine's forwarded requests to their owners.
type transport struct {
	n      *Node
	client *http.Client
	scheme string
}

var _ engine.Transport = (*transport)(nil)

func newTransport(n *Node) *transport {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   2 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// Every request a client sends for a partition served elsewhere
		// becomes one call, so many run at once to each node: keep their
		// connections instead of dialling per call.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// An owner applies a command within its log's commit; a minute
		// without an answer means the node is stuck, not busy.
		ResponseHeaderTimeout: time.Minute,
		ExpectContinueTimeout: 0,
	}
	scheme := "http://"
	if n.cfg.CallTLS != nil {
		tr.TLSClientConfig = n.cfg.CallTLS.Clone()
		scheme = "https://"
	}
	return &transport{n: n, client: &http.Client{Transport: tr}, scheme: scheme}
}

// url is where the node at addr takes calls.
func (t *transport) url(addr string) string { return t.scheme + addr + CallPath }

func (t *transport) close() { t.client.CloseIdleConnections() }

// notOwner is a call that certainly did not reach an engine: the engine
// retries it, and the owner map is read again.
func (t *transport) notOwner(format string, args ...any) error {
	t.n.triggerRefresh()
	return fmt.Errorf("%w: %s", engine.ErrNotOwner, fmt.Sprintf(format, args...))
}

// Call sends body to the node that owns part.
func (t *transport) Call(ctx context.Context, part int, body []byte) ([]byte, error) {
	o, ok := t.n.owners.assignedTo(part)
	if !ok {
		return nil, t.notOwner("no node is known to own partition %d", part)
	}
	if o.NodeID == t.n.cfg.Log.NodeID {
		return nil, t.notOwner("partition %d is not served here yet or any more", part)
	}
	cctx, stop := t.n.owners.whileMember(ctx, o.NodeID)
	ans, status, err := t.post(cctx, o.Addr, body)
	stop()
	if err != nil {
		if notDelivered(err) {
			return nil, t.notOwner("node %s at %s: %v", o.NodeID, o.Addr, err)
		}
		if cause := context.Cause(cctx); errors.Is(cause, errLeftGroup) {
			// Sent, so it may yet be applied (if the node comes back
			// before its next owner fences it): the engine answers a
			// command "outcome unknown" and asks a query again, of the
			// partition's next owner.
			return nil, fmt.Errorf("cluster: call to node %s at %s abandoned: %w", o.NodeID, o.Addr, cause)
		}
		return nil, fmt.Errorf("cluster: call to node %s at %s: %w", o.NodeID, o.Addr, err)
	}
	switch status {
	case http.StatusOK:
		return ans, nil
	case http.StatusUnauthorized:
		// Refused before any engine saw it; no retry will pass while
		// the secrets differ, but the owner may yet change.
		t.n.sendLog.warn(t.n.log, "a node refused this node's call: check that every node has the same cluster secret (SURGE_CLUSTER_SECRET or --cluster-secret-file)", "to", o.NodeID, "addr", o.Addr, "answer", string(bytes.TrimSpace(ans)))
		return nil, t.notOwner("node %s at %s refused the call (401): %s", o.NodeID, o.Addr, bytes.TrimSpace(ans))
	case http.StatusConflict, http.StatusServiceUnavailable, http.StatusNotFound:
		// Another cluster's node, one not serving calls yet, or a
		// process that is no surge node at that address: the request
		// was refused before any engine saw it.
		return nil, t.notOwner("node %s at %s answered %d: %s", o.NodeID, o.Addr, status, bytes.TrimSpace(ans))
	}
	return nil, fmt.Errorf("cluster: node %s at %s answered %d: %s", o.NodeID, o.Addr, status, bytes.TrimSpace(ans))
}

// Broadcast sends body to every other node at once, best effort.
func (t *transport) Broadcast(ctx context.Context, body []byte) {
	var wg sync.WaitGroup
	for _, m := range t.n.owners.memberList() {
		if m.NodeID == t.n.cfg.Log.NodeID {
			continue
		}
		wg.Go(func() {
			ctx, stop := t.n.owners.whileMember(ctx, m.NodeID)
			defer stop()
			if _, _, err := t.post(ctx, m.Addr, body); err != nil {
				t.n.log.Debug("broadcast to a node failed", "to", m.NodeID, "err", err)
			}
		})
	}
	wg.Wait()
}

func (t *transport) post(ctx context.Context, addr string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url(addr), bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set(HeaderCluster, t.n.cfg.Log.Cluster)
	req.Header.Set("Content-Type", "application/octet-stream")
	if _, err := sign(req, t.n.cfg.Secret, t.n.cfg.Log.Cluster, t.n.selfClaim(), body, time.Now()); err != nil {
		return nil, 0, err
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, MaxCallBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(ans) > MaxCallBytes {
		// Cut short, it would only fail to decode.
		return nil, 0, fmt.Errorf("the answer is larger than the limit of %d bytes (MaxCallBytes)", MaxCallBytes)
	}
	return ans, resp.StatusCode, nil
}

// notDelivered tells whether err proves the request never reached the
// other node: it could not be dialled (refused, unreachable, no route).
// Anything after the connection was made leaves the outcome open.
func notDelivered(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	// net/http reports a kept-alive connection the server closed while
	// idle, before this request was handed to it, with this (unexported)
	// error: the server never read the request.
	if strings.Contains(err.Error(), "http: server closed idle connection") {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Handler answers the calls other nodes forward to eng. Mount it at
// CallPath, only in cluster mode, and only where cluster nodes alone can
// reach it.
func (n *Node) Handler(eng *engine.Engine) http.Handler {
	return &callHandler{n: n, cluster: n.cfg.Log.Cluster, eng: eng}
}

type callHandler struct {
	n       *Node
	cluster string
	eng     *engine.Engine
}

func (h *callHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.n.leaving.Load() {
		// This node serves nothing any more. Closing each connection
		// after its answer keeps the callers from sending on one that the
		// listener's shutdown would close under them, which they could
		// not tell from a request lost after it was applied.
		w.Header().Set("Connection", "close")
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var signed authHeader
	if v := h.n.verify; v != nil {
		var err error
		if signed, err = v.check(r, h.cluster); err != nil {
			h.refuse(w, r, err.(*refusal))
			return
		}
	}
	h.n.lastCall.Store(time.Now().UnixNano())
	if r.Header.Get(HeaderProbe) != "" {
		h.answerProbe(w, signed)
		return
	}
	if got := r.Header.Get(HeaderCluster); got != h.cluster {
		http.Error(w, fmt.Sprintf("this node belongs to cluster %q, not %q", h.cluster, got), http.StatusConflict)
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	if h.n.verify != nil && sha256.Sum256(body) != signed.body {
		h.refuse(w, r, unauthorized("the body does not match the SHA-256 its signature covers"))
		return
	}
	ans := h.eng.HandleRemote(r.Context(), body)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	w.Write(ans)
}

// readBody reads a call's body up to MaxCallBytes, answering the caller
// itself when it cannot.
func (h *callHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > MaxCallBytes {
		http.Error(w, fmt.Sprintf("forwarded request of %d bytes exceeds %d", r.ContentLength, MaxCallBytes), http.StatusRequestEntityTooLarge)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCallBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("forwarded request exceeds %d bytes", MaxCallBytes), http.StatusRequestEntityTooLarge)
			return nil, false
		}
		http.Error(w, "reading the forwarded request: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// refuse answers a call that failed its signature check, and logs who
// it claimed to come from.
func (h *callHandler) refuse(w http.ResponseWriter, r *http.Request, why *refusal) {
	h.n.refusedLog.warn(h.n.log, "refused a call from another node: check that every node has the same cluster secret",
		"claimed_node", claim(r.Header.Get(HeaderNode)), "claimed_cluster", claim(r.Header.Get(HeaderCluster)),
		"remote", r.RemoteAddr, "status", why.status, "reason", why.reason)
	w.Header().Set("Connection", "close")
	http.Error(w, why.reason, why.status)
}
