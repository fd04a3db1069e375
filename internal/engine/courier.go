package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// resend sends again every message of the outbox that has waited longer
// than ResendAfter for its acknowledgement. On the partition's goroutine.
func (p *partition) resend() {
	now := p.e.mono()
	after := int64(p.e.opts.Cluster.ResendAfter)
	// In seq order: a receiver takes a source's messages only in order.
	for _, s := range slices.Sorted(maps.Keys(p.outbox)) {
		m := p.outbox[s]
		if !m.durable.Load() || now-m.sentNs.Load() < after {
			continue
		}
		m.sentNs.Store(now)
		p.e.sendMail(m.target, m.mail(p.id))
	}
}

// courier carries mail for partitions served elsewhere. Lost mail is
// harmless (senders re-send), so it never retries and drops what exceeds
// its limit rather than grow.
type courier struct {
	e      *Engine
	mu     sync.Mutex
	queued map[int][]mail
	n      int
	notes  []remoteNote
	signal chan struct{}
	done   chan struct{}
}

func (c *courier) push(target int, m mail) {
	c.mu.Lock()
	if c.n >= maxCourierMail {
		c.mu.Unlock()
		return
	}
	c.queued[target] = append(c.queued[target], m)
	c.n++
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

type remoteNote struct {
	Part     int
	Workload uint8
	V        any
}

// pushNote queues a note for the other nodes, whose observers (long
// polls, worker streams) may wait for this partition too.
func (c *courier) pushNote(part int, wl uint8, v any) {
	c.mu.Lock()
	if len(c.notes) >= maxCourierMail {
		c.mu.Unlock()
		return
	}
	c.notes = append(c.notes, remoteNote{part, wl, v})
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

func (c *courier) run(stop <-chan struct{}) {
	defer close(c.done)
	for {
		select {
		case <-stop:
			return
		case <-c.signal:
		}
		c.mu.Lock()
		q := c.queued
		c.queued = make(map[int][]mail, len(q))
		c.n = 0
		notes := c.notes
		c.notes = nil
		c.mu.Unlock()
		var wg sync.WaitGroup
		if len(notes) > 0 {
			wg.Go(func() {
				body, err := encodeValue(remoteHead(kindNotes, 0, 0), notes)
				if err != nil {
					c.e.log.Error("encoding notes for other nodes failed; the workload must list their types in WireTypes", "err", err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				c.e.opts.Cluster.Transport.Broadcast(ctx, body)
			})
		}
		for target, ms := range q {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for len(ms) > 0 {
					n := mailChunk(ms)
					body := encodeMailRequest(target, ms[:n])
					if _, err := c.e.opts.Cluster.Transport.Call(ctx, target, body); err != nil {
						c.e.log.Debug("delivering messages to another node failed; their senders will send them again", "partition", target, "err", err)
						return
					}
					ms = ms[n:]
				}
			})
		}
		wg.Wait()
	}
}
