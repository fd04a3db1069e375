package enginetest

// Cluster mode inside one process: partition logs and snapshots in memory
// with the fencing rule of the real (Kafka) log, and a transport that
// calls the owner's engine directly. Workload tests use Forwarding to run
// their API tests through a node that serves no partition, so every
// query, reply and note crosses the wire encoding.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
)

// ForwardEnv is the environment variable that makes workload API tests
// run through Forwarding (`make test` runs them both ways).
const ForwardEnv = "SURGE_TEST_FORWARD"

// Forward reports whether ForwardEnv is set.
func Forward() bool { return os.Getenv(ForwardEnv) != "" }

// Store holds the logs and snapshots of every partition of one cluster.
type Store struct {
	mu    sync.Mutex
	parts map[int]*memPart
	snaps map[uint32]memSnap
}

type memPart struct {
	records [][]byte // one per Append, each a concatenation of its entries
	sizes   [][]int
	epoch   uint64
	start   int // records before it were deleted
}

type memSnap struct {
	pos  cmdlog.Position
	data []byte
}

// NewStore returns an empty cluster store.
func NewStore() *Store {
	return &Store{parts: make(map[int]*memPart), snaps: make(map[uint32]memSnap)}
}

func (s *Store) part(p int) *memPart {
	mp := s.parts[p]
	if mp == nil {
		mp = &memPart{}
		s.parts[p] = mp
	}
	return mp
}

// Trim deletes the records of partition p before position pos, as a
// log's retention would.
func (s *Store) Trim(p int, pos int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	mp := s.part(p)
	mp.start = max(mp.start, min(pos, len(mp.records)))
}

// Records is the number of appends partition p's log holds.
func (s *Store) Records(p int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.part(p).records)
}

// Write implements engine.SnapshotStore.
func (s *Store) Write(p uint32, pos cmdlog.Position, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.snaps[p]; ok && old.pos > pos {
		return nil
	}
	s.snaps[p] = memSnap{pos, append([]byte(nil), data...)}
	return nil
}

// Latest implements engine.SnapshotStore.
func (s *Store) Latest(p uint32) (cmdlog.Position, []byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.snaps[p]
	return sn.pos, sn.data, ok, nil
}

// Open opens partition p's log for a new owner, fencing the earlier one.
func (s *Store) Open(p int) *Log {
	s.mu.Lock()
	mp := s.part(p)
	mp.epoch++
	l := &Log{s: s, p: p, epoch: mp.epoch, end: len(mp.records), queue: make(chan pending, 64), done: make(chan struct{})}
	s.mu.Unlock()
	go l.write()
	return l
}

// Log is one owner's view of a partition's log: a cmdlog.PartitionLog.
type Log struct {
	s      *Store
	p      int
	epoch  uint64
	end    int // records when opened: what Replay reads
	queue  chan pending
	done   chan struct{}
	mu     sync.Mutex
	closed bool
	// Hold, when set, is waited for before each append is written, so
	// a test can keep appends in flight.
	Hold chan struct{}
}

type pending struct {
	entries []cmdlog.Entry
	fn      cmdlog.DoneFunc
}

// Append implements cmdlog.PartitionLog.
func (l *Log) Append(entries []cmdlog.Entry, fn cmdlog.DoneFunc) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		fn(0, 0, cmdlog.ErrClosed)
		return
	}
	l.queue <- pending{entries, fn}
	l.mu.Unlock()
}

func (l *Log) write() {
	defer close(l.done)
	for a := range l.queue {
		if l.Hold != nil {
			<-l.Hold
		}
		var rec []byte
		sizes := make([]int, len(a.entries))
		for i, e := range a.entries {
			rec = append(rec, e.Data...)
			sizes[i] = len(e.Data)
		}
		l.s.mu.Lock()
		mp := l.s.part(l.p)
		if mp.epoch != l.epoch {
			l.s.mu.Unlock()
			a.fn(0, 0, cmdlog.ErrFenced)
			continue
		}
		pos := len(mp.records)
		mp.records = append(mp.records, rec)
		mp.sizes = append(mp.sizes, sizes)
		l.s.mu.Unlock()
		a.fn(cmdlog.Position(pos), cmdlog.Position(pos+1), nil)
	}
}

// Replay implements cmdlog.PartitionLog.
func (l *Log) Replay(from cmdlog.Position, fn func(cmdlog.Position, cmdlog.Entry) error) error {
	l.s.mu.Lock()
	mp := l.s.part(l.p)
	if int(from) < mp.start {
		l.s.mu.Unlock()
		return fmt.Errorf("enginetest: replay from %d, but the log starts at %d", from, mp.start)
	}
	recs, sizes := mp.records[:l.end], mp.sizes[:l.end]
	l.s.mu.Unlock()
	for i := int(from); i < len(recs); i++ {
		off := 0
		for _, n := range sizes[i] {
			if err := fn(cmdlog.Position(i), cmdlog.Entry{Partition: uint32(l.p), Data: recs[i][off : off+n]}); err != nil {
				return err
			}
			off += n
		}
	}
	return nil
}

// Start implements cmdlog.PartitionLog.
func (l *Log) Start() cmdlog.Position {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return cmdlog.Position(l.s.part(l.p).start)
}

// Close implements cmdlog.PartitionLog.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return nil
}

// Net connects the engines of one in-process cluster.
type Net struct {
	mu    sync.Mutex
	nodes []*engine.Engine
	// down makes calls to a node fail as a refused connection; isolated
	// makes its own calls fail too (a node cut off from the others).
	down     map[int]bool
	isolated map[int]bool
}

// Isolate cuts node i off: calls to it and from it fail.
func (n *Net) Isolate(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.isolated == nil {
		n.isolated = make(map[int]bool)
	}
	n.isolated[i] = true
}

// Transport returns the transport of the node with index self.
func (n *Net) Transport(self int) engine.Transport { return &transport{n: n, self: self} }

// Add registers a node's engine; its index is the order of Add calls.
func (n *Net) Add(e *engine.Engine) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodes = append(n.nodes, e)
}

// SetDown makes node i unreachable (true) or reachable again.
func (n *Net) SetDown(i int, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down == nil {
		n.down = make(map[int]bool)
	}
	n.down[i] = down
}

type transport struct {
	n    *Net
	self int
}

func (t *transport) Call(ctx context.Context, part int, body []byte) ([]byte, error) {
	t.n.mu.Lock()
	if t.n.isolated[t.self] {
		t.n.mu.Unlock()
		return nil, fmt.Errorf("%w: node %d is cut off", engine.ErrNotOwner, t.self)
	}
	var owner *engine.Engine
	for i, e := range t.n.nodes {
		if i == t.self || t.n.down[i] || t.n.isolated[i] {
			continue
		}
		if e.Serves(part) {
			owner = e
		}
	}
	t.n.mu.Unlock()
	if owner == nil {
		return nil, fmt.Errorf("%w: no node serves partition %d", engine.ErrNotOwner, part)
	}
	return owner.HandleRemote(ctx, append([]byte(nil), body...)), nil
}

func (t *transport) Broadcast(ctx context.Context, body []byte) {
	t.n.mu.Lock()
	nodes := append([]*engine.Engine(nil), t.n.nodes...)
	down := make(map[int]bool, len(t.n.down))
	for k, v := range t.n.down {
		down[k] = v
	}
	t.n.mu.Unlock()
	t.n.mu.Lock()
	cut := t.n.isolated[t.self]
	t.n.mu.Unlock()
	for i, e := range nodes {
		if i != t.self && !down[i] && !cut {
			e.HandleRemote(ctx, body)
		}
	}
}

// Forwarding opens a two-node in-process cluster with the workloads and
// returns the node that serves no partition: every request made through
// it is forwarded to the other node, which serves them all. opts.Notify
// goes to the returned node, which gets the other node's notes. Both are
// closed when the test ends.
func Forwarding(t testing.TB, opts engine.Options, workloads ...engine.Workload) *engine.Engine {
	t.Helper()
	if opts.Partitions <= 0 {
		opts.Partitions = engine.DefaultPartitions
	}
	if opts.Logger == nil || os.Getenv(ForwardEnv) == "debug" {
		opts.Logger = slog.New(slog.DiscardHandler)
		if os.Getenv(ForwardEnv) == "debug" {
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
	}
	store, net := NewStore(), &Net{}
	open := func(self int, notify func(int, uint8, any)) *engine.Engine {
		o := opts
		o.Log, o.Snapshots, o.Notify = nil, store, notify
		o.Cluster = &engine.Cluster{Transport: net.Transport(self)}
		e, err := engine.Open(o, workloads...)
		if err != nil {
			t.Fatal(err)
		}
		net.Add(e)
		return e
	}
	client := open(0, opts.Notify)
	owner := open(1, nil)
	t.Cleanup(func() {
		errs := errors.Join(client.Close(), owner.Close())
		if errs != nil {
			t.Error(errs)
		}
	})
	for p := range opts.Partitions {
		if err := owner.Acquire(p, store.Open(p)); err != nil {
			t.Fatal(err)
		}
	}
	return client
}
