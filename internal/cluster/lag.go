package cluster

import (
	"context"
	"sync"
	"time"
)

// LagRefresh is the least time between two reads of the log's end offsets
// for Lags: an operator's console asking every second costs Kafka one
// ListOffsets a second per node at most, however many consoles are open.
const LagRefresh = time.Second

// lagCache holds the last answer of Lags.
type lagCache struct {
	mu   sync.Mutex
	at   time.Time
	lags map[int]int64
}

// Lags is each served partition's lag (log records past what its state
// has applied, as the surge_kafka_consumer_lag gauge), read from Kafka at
// most once per LagRefresh; nil when Kafka did not answer within
// lagTimeout. The map is shared: callers must not change it.
func (n *Node) Lags(ctx context.Context) map[int]int64 {
	n.lagCache.mu.Lock()
	defer n.lagCache.mu.Unlock()
	if time.Since(n.lagCache.at) < LagRefresh {
		return n.lagCache.lags
	}
	n.lagCache.lags = n.readLags(ctx)
	n.lagCache.at = time.Now()
	return n.lagCache.lags
}

func (n *Node) readLags(ctx context.Context) map[int]int64 {
	n.mu.Lock()
	eng := n.eng
	n.mu.Unlock()
	if eng == nil {
		return nil
	}
	owned := eng.Owned()
	if len(owned) == 0 {
		return map[int]int64{}
	}
	ctx, cancel := context.WithTimeout(ctx, lagTimeout)
	defer cancel()
	ends, err := n.adm.ListEndOffsets(ctx, n.topic)
	if err != nil {
		n.log.Debug("listing end offsets for the overview's lag failed", "err", err)
		return nil
	}
	out := make(map[int]int64, len(owned))
	for _, p := range owned {
		if o, ok := ends.Lookup(n.topic, int32(p)); ok && o.Err == nil {
			out[p] = lagOf(o.Offset, int64(eng.Position(p)), n.slots[p].marker.Load())
		}
	}
	return out
}
