package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/wire"
)

// blobs is a test workload of commands as large as a test wants: put
// stores a value's length under a key, sendPut sends a put of a given size
// to another key, timerPut sets a timer whose command is such a put, and
// hold blocks its partition until the test closes the workload's hold
// channel, having first said on holding (when set) that it holds.
type blobs struct{ hold, holding chan struct{} }

func (blobs) ID() uint8        { return 9 }
func (blobs) WireTypes() []any { return []any{getSize{}, 0} }
func (blobs) Name() string     { return "blobs" }
func (w blobs) NewMachine(int) engine.Machine {
	return &blobMachine{hold: w.hold, holding: w.holding, sizes: map[string]int{}}
}

type blobMachine struct {
	hold, holding chan struct{}
	sizes         map[string]int
}

type put struct {
	Key  string
	Data []byte
}
type sendPut struct {
	To   string
	Size int
}
type timerPut struct {
	ID   string
	Size int
}
type hold struct{}
type getSize struct{ Key string }

func (c *put) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 1)}
	w.Str(c.Key)
	w.Bytes(c.Data)
	return w.B, nil
}

func (c *sendPut) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 2)}
	w.Str(c.To)
	w.U64(uint64(c.Size))
	return w.B, nil
}

func (c *timerPut) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 3)}
	w.Str(c.ID)
	w.U64(uint64(c.Size))
	return w.B, nil
}

func (c *hold) AppendBinary(b []byte) ([]byte, error) { return append(b, 4), nil }

func (m *blobMachine) Decode(b []byte) (engine.Command, error) {
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	r := wire.Reader{B: b[1:]}
	var c engine.Command
	switch b[0] {
	case 1:
		c = &put{Key: r.Str(), Data: r.Bytes()}
	case 2:
		c = &sendPut{To: r.Str(), Size: int(r.U64())}
	case 3:
		c = &timerPut{ID: r.Str(), Size: int(r.U64())}
	case 4:
		c = &hold{}
	default:
		return nil, fmt.Errorf("tag %d", b[0])
	}
	return c, r.Err
}

// Apply replies with the error of Send or SetTimer, if any.
func (m *blobMachine) Apply(in *engine.Input, fx *engine.Effects) {
	var err error
	switch c := in.Cmd.(type) {
	case *put:
		m.sizes[c.Key] = len(c.Data)
	case *sendPut:
		err = fx.Send(c.To, 9, &put{Key: c.To, Data: make([]byte, c.Size)})
	case *timerPut:
		err = fx.SetTimer(c.ID, in.TimeNs, &put{Key: c.ID, Data: make([]byte, c.Size)})
	case *hold:
		select {
		case m.holding <- struct{}{}:
		default: // nobody asked, or a replay
		}
		<-m.hold
	}
	fx.Reply(err)
}

func (m *blobMachine) Query(q any) any { return m.sizes[q.(getSize).Key] }

func (m *blobMachine) AppendSnapshot(dst []byte) []byte { return dst }
func (m *blobMachine) Restore([]byte) error             { return nil }

func openBlobs(t *testing.T, w blobs, mod func(o *engine.Options)) *engine.Engine {
	t.Helper()
	e := openOnePartition(t, mod, w)
	t.Cleanup(func() {
		if w.hold != nil {
			select {
			case <-w.hold:
			default:
				close(w.hold) // a failed test left its partition held
			}
		}
		e.Close()
	})
	return e
}

// openOnePartition opens an engine of one partition of ws on a log and
// snapshots of a test directory of its own, mod changing its options.
func openOnePartition(t *testing.T, mod func(o *engine.Options), ws ...engine.Workload) *engine.Engine {
	t.Helper()
	dir := t.TempDir()
	sd, err := wal.OpenSnapshotDir(nil, filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := engine.Options{Partitions: 1, Log: lg, Snapshots: sd, Logger: quiet}
	if mod != nil {
		mod(&o)
	}
	e, err := engine.Open(o, ws...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// putOf returns a put whose encoding is exactly n bytes.
func putOf(key string, n int) *put {
	c := &put{Key: key}
	head, _ := c.AppendBinary(nil) // with an empty value: its length takes 1 byte
	for lenBytes := 1; lenBytes <= 5; lenBytes++ {
		c.Data = make([]byte, max(0, n-len(head)+1-lenBytes))
		if b, _ := c.AppendBinary(nil); len(b) == n {
			return c
		}
	}
	panic(fmt.Sprintf("no put of %d bytes", n))
}

func sizeOf(t *testing.T, e *engine.Engine, key string) int {
	t.Helper()
	v, err := e.Query(context.Background(), 0, 9, getSize{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return v.(int)
}

// A command whose log entry would be larger than cmdlog.MaxEntryBytes is
// refused alone, before it is applied: the commands of its batch succeed,
// the engine goes on, and a command of exactly the limit is taken.
func TestCommandTooLargeForTheLogIsRefusedAlone(t *testing.T) {
	w := blobs{hold: make(chan struct{}), holding: make(chan struct{}, 1)}
	e := openBlobs(t, w, nil)
	ctx := context.Background()

	// Hold the partition so that the big command shares a batch with
	// small ones.
	held := make(chan error, 1)
	go func() { _, err := e.Do(ctx, 0, 9, &hold{}); held <- err }()
	<-w.holding
	cmds := []*put{
		putOf("small1", 100),
		putOf("over", engine.MaxCommandBytes+1), // just over the limit
		putOf("issue17", 17_000_000),            // the size of issue 17's batch
		putOf("small2", 100),
	}
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Go(func() { _, errs[i] = e.Do(ctx, 0, 9, c) })
		time.Sleep(10 * time.Millisecond) // in order, for readability only
	}
	close(w.hold)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		big := len(c.Data) > 1000
		switch {
		case big && !errors.Is(errs[i], engine.ErrTooLarge):
			t.Errorf("%s: got %v, want ErrTooLarge", c.Key, errs[i])
		case big && !strings.Contains(errs[i].Error(), fmt.Sprint(cmdlog.MaxEntryBytes)):
			t.Errorf("%s: %v does not name the limit %d", c.Key, errs[i], cmdlog.MaxEntryBytes)
		case !big && errs[i] != nil:
			t.Errorf("%s: %v", c.Key, errs[i])
		}
		want := len(c.Data)
		if big {
			want = 0
		}
		if got := sizeOf(t, e, c.Key); got != want {
			t.Errorf("%s: stored %d bytes, want %d", c.Key, got, want)
		}
	}
	if e.Failed() {
		t.Fatal("the engine failed")
	}
	edge := putOf("edge", engine.MaxCommandBytes)
	if _, err := e.Do(ctx, 0, 9, edge); err != nil {
		t.Fatalf("a command of exactly the limit: %v", err)
	}
	if got := sizeOf(t, e, "edge"); got != len(edge.Data) {
		t.Fatalf("edge: stored %d bytes, want %d", got, len(edge.Data))
	}
}

// A message or timer command too large for the log is refused by Send or
// SetTimer (the workload sees the error), and nothing is sent or set.
func TestMessageAndTimerTooLargeForTheLogAreRefused(t *testing.T) {
	e := openBlobs(t, blobs{}, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cmd  engine.Command
		key  string
	}{
		{"message", &sendPut{To: "m", Size: cmdlog.MaxEntryBytes - 20}, "m"},
		{"timer", &timerPut{ID: "t", Size: cmdlog.MaxEntryBytes}, "t"},
	} {
		v, err := e.Do(ctx, 0, 9, tc.cmd)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if rerr, _ := v.(error); !errors.Is(rerr, engine.ErrTooLarge) {
			t.Errorf("%s: Apply saw %v, want ErrTooLarge", tc.name, v)
		}
		// Whatever would have followed (delivery, firing) has had a
		// batch to happen in by the time a later command is answered.
		if _, err := e.Do(ctx, 0, 9, putOf("after-"+tc.name, 100)); err != nil {
			t.Fatal(err)
		}
		if got := sizeOf(t, e, tc.key); got != 0 {
			t.Errorf("%s: %d bytes arrived", tc.name, got)
		}
	}
	// Just under the limits, both go through.
	if v, err := e.Do(ctx, 0, 9, &sendPut{To: "m", Size: 1 << 20}); err != nil || v != nil && v.(error) != nil {
		t.Fatalf("a 1 MiB message: %v %v", v, err)
	}
	if e.Failed() {
		t.Fatal("the engine failed")
	}
}

// Many large commands queued at once are all applied, in batches whose
// log bytes stay within MaxBatchBytes.
func TestBatchBytesAreBounded(t *testing.T) {
	w := blobs{hold: make(chan struct{}), holding: make(chan struct{}, 1)}
	var mu sync.Mutex
	largest, batches := 0, 0
	e := openBlobs(t, w, func(o *engine.Options) {
		engine.ObserveBatchBytes(o, func(n int) {
			mu.Lock()
			largest = max(largest, n)
			if n > 0 {
				batches++
			}
			mu.Unlock()
		})
	})
	ctx := context.Background()
	held := make(chan error, 1)
	go func() { _, err := e.Do(ctx, 0, 9, &hold{}); held <- err }()
	<-w.holding
	const n, size = 40, 1 << 20
	errs := make([]error, n)
	cmds := make([]*put, n)
	var wg sync.WaitGroup
	for i := range n {
		cmds[i] = putOf(fmt.Sprint("k", i), size)
		wg.Go(func() { _, errs[i] = e.Do(ctx, 0, 9, cmds[i]) })
	}
	// Every one queued behind the hold: they would fit one batch by count.
	deadline := time.Now().Add(30 * time.Second)
	for engine.InboxLen(e, 0) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d commands queued", engine.InboxLen(e, 0), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(w.hold)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if got := sizeOf(t, e, cmds[i].Key); got != len(cmds[i].Data) {
			t.Fatalf("%s: stored %d bytes, want %d", cmds[i].Key, got, len(cmds[i].Data))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if largest > engine.MaxBatchBytes {
		t.Fatalf("a batch held %d log bytes; the bound is %d", largest, engine.MaxBatchBytes)
	}
	t.Logf("%d batches, the largest %d bytes", batches, largest)
}

// sizeTransport records the largest body sent through it.
type sizeTransport struct {
	engine.Transport
	largest atomic.Int64
}

func (s *sizeTransport) Call(ctx context.Context, part int, body []byte) ([]byte, error) {
	for {
		old := s.largest.Load()
		if int64(len(body)) <= old || s.largest.CompareAndSwap(old, int64(len(body))) {
			break
		}
	}
	return s.Transport.Call(ctx, part, body)
}

// Large commands forwarded to another node at once go in calls of at most
// MaxRemoteBytes, which the receiving node's transport accepts, and all
// are applied.
func TestForwardedBatchesAreBoundedInBytes(t *testing.T) {
	w := blobs{hold: make(chan struct{}), holding: make(chan struct{}, 1)}
	store, net := enginetest.NewStore(), &enginetest.Net{}
	var nodes []*engine.Engine
	var tr *sizeTransport
	for i := range 2 {
		var t0 engine.Transport = net.Transport(i)
		if i == 1 {
			tr = &sizeTransport{Transport: t0}
			t0 = tr
		}
		e, err := engine.Open(engine.Options{Partitions: 1, Snapshots: store, Logger: quiet,
			Cluster: &engine.Cluster{Transport: t0, ForwardTimeout: 30 * time.Second}}, w)
		if err != nil {
			t.Fatal(err)
		}
		net.Add(e)
		nodes = append(nodes, e)
	}
	t.Cleanup(func() {
		select {
		case <-w.hold:
		default:
			close(w.hold)
		}
		for _, e := range nodes {
			e.Close()
		}
	})
	if err := nodes[0].Acquire(0, store.Open(0)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The hold's call is out while the large commands queue behind it.
	held := make(chan error, 1)
	go func() { _, err := nodes[1].Do(ctx, 0, 9, &hold{}); held <- err }()
	// Applied, not only sent: a hold still queued could share its call
	// with the first large command.
	<-w.holding
	const n = 5
	size := engine.MaxCommandBytes - 1<<20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = nodes[1].Do(ctx, 0, 9, putOf(fmt.Sprint("k", i), size)) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for engine.PendingForwards(nodes[1], 0) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d commands wait to be forwarded", engine.PendingForwards(nodes[1], 0), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(w.hold)
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if got := tr.largest.Load(); got > engine.MaxRemoteBytes {
		t.Fatalf("a call carried %d bytes; the bound is %d", got, engine.MaxRemoteBytes)
	}
	v, err := nodes[1].Query(ctx, 0, 9, getSize{Key: "k4"})
	if err != nil || v.(int) == 0 {
		t.Fatalf("k4 after forwarding: %v %v", v, err)
	}
}
