package engine

import (
	"sync"
	"sync/atomic"
)

// outMsg is a message this partition sent and the receiver has not yet
// acknowledged as durable. The outbox is part of the snapshot, so a message
// survives a crash on either side; the receiver's high-water mark per
// source drops the re-sends.
type outMsg struct {
	seq      uint64
	target   int
	workload uint8
	data     []byte
	sentNs   atomic.Int64 // cluster mode: when it was last sent (not durable)
	// durable is set once the command that sent it is durable; until
	// then it must not leave the partition, not even as a re-send.
	durable atomic.Bool
	// prev is the seq of the message this partition sent to the same
	// target before this one (0 for the first): across nodes, messages
	// can arrive out of order, and a receiver applies one only after the
	// one before it, so that its high-water mark never skips a message.
	prev uint64
	// tc is the trace of the apply that sent it (nil: untraced); kept in
	// memory only, like the mail's.
	tc *TraceContext
}

func (m *outMsg) mail(src int) mail {
	return mail{src: uint32(src), seq: m.seq, prev: m.prev, workload: m.workload, data: m.data, tc: m.tc}
}

// mail is internal traffic between partitions: a message, or the
// acknowledgement that a message is durable at its receiver.
type mail struct {
	ack      bool
	src      uint32
	seq      uint64
	prev     uint64 // see outMsg.prev
	workload uint8
	data     []byte
	tc       *TraceContext // the sender's trace (nil: untraced)
}

// recordBytes is the size of the log record m becomes (acknowledgements
// become none).
func (m *mail) recordBytes() int {
	if m.ack {
		return 0
	}
	return msgHeader + len(m.data)
}

// mailbox is unbounded on purpose: it is filled from the log's completion
// callback, which must never block (a full inbox there could deadlock two
// partitions that message each other). Its growth is bounded by the
// bounded client inboxes that cause the traffic.
type mailbox struct {
	mu     sync.Mutex
	items  []mail
	head   int // items before it were taken
	signal chan struct{}
}

func (m *mailbox) push(x mail) {
	m.mu.Lock()
	m.items = append(m.items, x)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// take removes up to max of the oldest pending items into dst, as long as
// their log records fit in maxBytes. Whatever
// is left re-arms the signal, so the processor comes back for it in its
// next batch: a batch never holds more than MaxBatch inputs, nor, since
// Effects.Send bounds every message, more than MaxBatchBytes. The rest is
// moved down only once the taken part is the larger half, so draining a
// long mailbox (a restart re-sends every unacknowledged message at once)
// costs each item one move, not one per batch taken before it.
func (m *mailbox) take(dst []mail, max, maxBytes int) []mail {
	m.mu.Lock()
	n, size := 0, 0
	for n < min(max, len(m.items)-m.head) {
		size += m.items[m.head+n].recordBytes()
		if size > maxBytes {
			break
		}
		n++
	}
	dst = append(dst, m.items[m.head:m.head+n]...)
	clear(m.items[m.head : m.head+n])
	m.head += n
	if m.head >= len(m.items)-m.head {
		rest := copy(m.items, m.items[m.head:])
		clear(m.items[rest:])
		m.items, m.head = m.items[:rest], 0
	}
	rest := len(m.items) - m.head
	m.mu.Unlock()
	if rest > 0 {
		select {
		case m.signal <- struct{}{}:
		default:
		}
	}
	return dst
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items) - m.head
}

// reset drops every pending item.
func (m *mailbox) reset() {
	m.mu.Lock()
	clear(m.items)
	m.items, m.head = m.items[:0], 0
	m.mu.Unlock()
}

type ackTo struct {
	src int
	seq uint64
}

func (e *Engine) deliverAcks(from int, acks []ackTo) {
	for _, a := range acks {
		e.sendMail(a.src, mail{ack: true, seq: a.seq})
	}
}

// sendMail delivers m to partition target: into its mailbox when this
// node serves it, else through the courier. Never blocks.
func (e *Engine) sendMail(target int, m mail) {
	t := e.parts[target]
	if !e.clusterMode() || t.serving.Load() {
		t.mail.push(m)
		return
	}
	e.courier.push(target, m)
}
