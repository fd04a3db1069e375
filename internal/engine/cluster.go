package engine

// Cluster mode.
//
// In cluster mode several nodes share the partitions. Each partition has a
// log of its own (cmdlog.PartitionLog, a Kafka topic partition) and one
// owner at a time: the node that opened the log last, which fenced every
// earlier one. The engine itself stays what it is on one machine (one
// processor per partition, apply then log, effects released when durable);
// cluster mode adds three things at the seam, so that every workload works
// on a cluster without code of its own:
//
//   - Ownership (ownership.go). Partitions start unowned. Acquire
//     restores a partition from its latest snapshot and the log after
//     it, then serves it; Release stops serving it (requests still
//     queued are answered errMoved and go to the new owner), writes a
//     snapshot so the next owner replays little, and closes the log. A
//     log that fails (fenced, broker gone) releases its partition by
//     itself and tells OnLost.
//   - Routing (forward.go; the request format in remotewire.go, values
//     carried with gob in wirevalues.go). A request for a partition
//     served elsewhere is encoded (commands with their own
//     AppendBinary, queries and replies with gob) and handed to the
//     Transport, which carries it to the owner's HandleRemote. "Not the
//     owner" answers are retried until the partition has an owner
//     again, within ForwardTimeout; an ambiguous failure of a command
//     (the connection broke after sending) is not retried, since the
//     command may have been applied.
//   - Messages (courier.go). Cross-partition messages and their
//     acknowledgements to a partition served elsewhere go through the
//     Transport too. Delivery there can fail (the receiver moves, a node
//     dies), so each partition re-sends the messages of its outbox that
//     stay unacknowledged for ResendAfter; receivers drop duplicates by
//     their per-source high-water mark as they do after a crash, so the
//     effect stays exactly once.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Cluster configures cluster mode (Options.Cluster).
type Cluster struct {
	// Transport carries requests and messages to the owners of partitions
	// this node does not serve. Required.
	Transport Transport
	// OnLost is told when a partition's log failed and the engine stopped
	// serving it (err wraps cmdlog.ErrFenced when another node took it
	// over). It runs on its own goroutine.
	OnLost func(part int, err error)
	// ResendAfter is how long a message may stay unacknowledged before its
	// sender sends it again. Default 2 s.
	ResendAfter time.Duration
	// ForwardTimeout bounds how long a request waits for a partition to
	// have an owner (during a failover). Default 15 s.
	ForwardTimeout time.Duration
}

// Transport carries an encoded request to the node that owns a partition.
type Transport interface {
	// Call delivers body to the Engine.HandleRemote of the node that owns
	// part and returns its answer. It returns an error wrapping
	// ErrNotOwner when it knows the request was not delivered (no owner is
	// known, the connection was refused): the engine then retries.
	Call(ctx context.Context, part int, body []byte) ([]byte, error)
	// Broadcast delivers body to the HandleRemote of every other node,
	// best effort (it carries Effects.Notify values, which are hints).
	Broadcast(ctx context.Context, body []byte)
}

var (
	// ErrNotOwner means the partition has no owner reachable from this
	// node right now (a failover is under way): nothing was done; retry.
	ErrNotOwner = errors.New("engine: the partition is moving to another node; nothing was done, retry")
	// ErrOutcomeUnknown means a command was lost on its way in a way that
	// leaves its outcome unknown (the connection to the partition's owner
	// broke after it was sent, or the owner's log failed while writing
	// it): it may or may not have been applied.
	ErrOutcomeUnknown = errors.New("engine: the partition's owner failed while the command was under way; it may or may not have been applied")
	// errMoved answers a request that was queued for a partition this
	// node stopped serving before applying it; submit sends it on.
	errMoved = errors.New("engine: partition released before the request was applied")
)

const (
	defaultResendAfter    = 2 * time.Second
	defaultForwardTimeout = 15 * time.Second
	maxCourierMail        = 1 << 17
	maxCallMail           = 4096 // mails in one call

	// MaxRemoteBytes bounds the body of one request the engine sends
	// to another node (a batch of forwarded requests, a batch of mail):
	// the transport must accept that much. A single command of
	// cmdlog.MaxEntryBytes always fits; batches are split to fit.
	MaxRemoteBytes = 32 << 20
	// maxForwardQueryBytes bounds a query's encoding for another node
	// (queries are small; a huge one is a bug, refused with ErrTooLarge).
	maxForwardQueryBytes = cmdlog.MaxEntryBytes
)

func (e *Engine) clusterMode() bool { return e.opts.Cluster != nil }

// closeCluster releases every partition served here (each writes its
// hand-over snapshot) and stops the courier and the snapshotter.
func (e *Engine) closeCluster() error {
	errs := make([]error, len(e.parts))
	var wg sync.WaitGroup
	for i, p := range e.parts {
		wg.Go(func() { errs[i] = p.release() })
	}
	wg.Wait()
	close(e.stop)
	<-e.courier.done
	e.wg.Wait()
	close(e.snapCh)
	e.snapWG.Wait()
	return errors.Join(errs...)
}

func (e *Engine) isClosed() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.closed
}
