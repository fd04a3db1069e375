package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/groupcommit"
)

// ErrCommitUnknown is wrapped by the error an append's done gets when Kafka
// did not say whether its transaction committed (the connection broke or
// the time ran out during the commit itself). Such entries may be durable:
// the next owner's replay decides. Every other error except
// cmdlog.ErrFenced comes from before the commit was sent, and the
// transaction was aborted (or will be, by Kafka's transaction timeout): those
// entries are not durable and never will be. A fenced append is not
// durable either.
var ErrCommitUnknown = errors.New("kafkalog: Kafka did not confirm whether the transaction committed; the append may be durable")

// Bounds of one group-commit transaction: past these, queued appends wait
// for the next one, so a transaction stays well inside its timeout.
const (
	maxTxnAppends = 1024
	maxTxnBytes   = 16 << 20
)

// metadataMinAge spaces the producer's metadata refreshes (see Open).
const metadataMinAge = 100 * time.Millisecond

// Log is one Surge partition's command log: one partition of the log topic,
// written by the partition's transactional producer. It implements
// cmdlog.PartitionLog. Positions are Kafka offsets; every entry of one
// record has the record's offset as its position.
type Log struct {
	cfg       Config
	partition int32
	topic     string
	cl        *kgo.Client
	adm       *kadm.Client
	// marker is the offset of the record this owner committed on Open:
	// everything durable before it belongs to earlier owners.
	marker int64
	start  atomic.Int64

	ctx    context.Context // cancelled by Close, to stop a replay
	cancel context.CancelFunc

	mu         sync.RWMutex // guards closed against sends on queue
	closed     bool
	queue      chan *request
	writerDone chan struct{}
	early      *groupcommit.Early // when the next transaction may start before MinCycle

	// err is the writer's sticky failure: after any failed cycle nothing
	// more is produced, since later batches were applied on top of the
	// lost ones. Only the writer goroutine touches it until writerDone.
	err error

	// beforeCommit, set only by tests, runs after a cycle's records are
	// produced and before its transaction commits.
	beforeCommit func()
}

type request struct {
	entries []cmdlog.Entry
	done    cmdlog.DoneFunc
	queued  time.Time
	bytes   int // of the entries' data, summed once by Append
	recs    []*kgo.Record
}

var _ cmdlog.PartitionLog = (*Log)(nil)

// Open takes over Surge partition `partition`: it initialises the
// partition's transactional id, which fences every earlier owner and aborts
// its open transaction, and commits a marker record. Replay then reads up
// to that marker.
func Open(ctx context.Context, cfg Config, partition int) (*Log, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if partition < 0 || partition > 1<<31-1 {
		return nil, fmt.Errorf("kafkalog: partition %d out of range", partition)
	}
	topic := cfg.LogTopic()
	cl, err := cfg.NewClient(
		kgo.TransactionalID(cfg.TransactionalID(partition)),
		kgo.TransactionTimeout(cfg.TxnTimeout),
		// A record the client cannot deliver within the transaction's
		// lifetime is failed instead of retried forever: the transaction
		// would be aborted by Kafka anyway.
		kgo.RecordDeliveryTimeout(cfg.TxnTimeout),
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		// Each cycle flushes at once; lingering would only add latency.
		kgo.ProducerLinger(0),
		// A transaction's first produce that reaches Kafka while the
		// previous transaction's markers are still being written is
		// refused with CONCURRENT_TRANSACTIONS, and franz-go retries it
		// only after a metadata refresh, which it spaces by this age
		// (default 5 s). A transaction started right after one that
		// followed a refresh (the first append after Open, or after an
		// earlier refusal) stalled for up to 5 s, past a short
		// transaction timeout. 100 ms is the Java client's retry backoff.
		kgo.MetadataMinAge(metadataMinAge),
		// The default (1 MB) would refuse a record holding one large
		// entry; the topic takes this much (EnsureTopics checks).
		kgo.ProducerBatchMaxBytes(MaxMessageBytes),
		kgo.WithLogger(KgoLogger(cfg.Logger, "kafka: ")),
	)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Log{
		cfg:        cfg,
		partition:  int32(partition),
		topic:      topic,
		cl:         cl,
		adm:        kadm.NewClient(cl),
		ctx:        lctx,
		cancel:     cancel,
		queue:      make(chan *request, cfg.QueueLen),
		writerDone: make(chan struct{}),
		early:      groupcommit.New(),
	}
	if err := l.writeMarker(ctx); err != nil {
		cancel()
		cl.Close()
		return nil, err
	}
	start, err := l.listStart(ctx)
	if err != nil {
		cancel()
		cl.Close()
		return nil, err
	}
	l.start.Store(start)
	go l.writer()
	return l, nil
}

// writeMarker fences the earlier owners and records where their log ends.
func (l *Log) writeMarker(ctx context.Context) error {
	// InitProducerID is what fences: Kafka bumps the transactional id's
	// epoch and aborts whatever transaction the previous holder left open.
	_, epoch, err := l.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("kafkalog: partition %d: initialising transactional id %s: %w", l.partition, l.cfg.TransactionalID(int(l.partition)), err)
	}
	if err := l.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("kafkalog: partition %d: %w", l.partition, err)
	}
	rec := &kgo.Record{
		Partition: l.partition,
		Value:     fmt.Appendf(nil, "node=%s time=%s", l.cfg.NodeID, time.Now().UTC().Format(time.RFC3339Nano)),
		Headers: []kgo.RecordHeader{
			{Key: headerMarker, Value: []byte("1")},
			{Key: headerNode, Value: []byte(l.cfg.NodeID)},
			{Key: headerEpoch, Value: strconv.AppendInt(nil, int64(epoch), 10)},
		},
	}
	if err := l.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		_ = l.cl.AbortBufferedRecords(ctx)
		_ = l.cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("kafkalog: partition %d: writing the ownership marker: %w", l.partition, err)
	}
	if err := l.awaitPartitionKnown(ctx); err != nil {
		_ = l.cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("kafkalog: partition %d: writing the ownership marker: %w", l.partition, err)
	}
	if err := l.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("kafkalog: partition %d: committing the ownership marker: %w", l.partition, err)
	}
	l.marker = rec.Offset
	return nil
}

// awaitPartitionKnown waits until the client's producer lists the log's
// partition. The marker is this client's first produce to the topic, and
// franz-go (v1.22.2 and v1.22.3) publishes a new topic's partitions to its
// producer only after the records it held for them are buffered: the
// marker can be acknowledged first. EndTransaction then finds no partition
// in the transaction, aborts it instead of committing, and returns nil;
// the marker is gone and the next produce fails with
// OUT_OF_ORDER_SEQUENCE_NUMBER (its sequences were not reset either). A
// test opening a log and appending at once hit it about once in a few
// hundred opens on a loaded machine. PartitionLeader reads the same list
// EndTransaction walks.
func (l *Log) awaitPartitionKnown(ctx context.Context) error {
	for {
		leader, _, err := l.cl.PartitionLeader(l.topic, l.partition)
		if err == nil && leader >= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("the producer did not list the partition after its first record was acknowledged (%v): %w", err, ctx.Err())
			}
			return fmt.Errorf("the producer did not list the partition after its first record was acknowledged: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (l *Log) listStart(ctx context.Context) (int64, error) {
	offs, err := l.adm.ListStartOffsets(ctx, l.topic)
	if err != nil {
		return 0, fmt.Errorf("kafkalog: partition %d: listing the start offset: %w", l.partition, err)
	}
	o, ok := offs.Lookup(l.topic, l.partition)
	if !ok {
		return 0, fmt.Errorf("kafkalog: topic %s has no partition %d", l.topic, l.partition)
	}
	if o.Err != nil {
		return 0, fmt.Errorf("kafkalog: partition %d: listing the start offset: %w", l.partition, o.Err)
	}
	return o.Offset, nil
}

// Wanted and OnWait are cmdlog.CommitWaiter's, for the writer's wait for
// the partition's next transaction.
func (l *Log) Wanted() int { return l.early.Wanted() }

func (l *Log) OnWait(fn func()) { l.early.OnWait(fn) }

// Hurry is cmdlog.CommitWaiter's.
func (l *Log) Hurry() { l.early.Hurry() }

// Append queues entries for the next transaction; it blocks while the
// queue is full. done is called from the writer goroutine, in Append order.
func (l *Log) Append(entries []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		done(0, 0, cmdlog.ErrClosed)
		return
	}
	n := 0
	for _, e := range entries {
		n += len(e.Data)
	}
	l.queue <- &request{entries: entries, done: done, queued: time.Now(), bytes: n}
	l.mu.RUnlock()
	l.early.Appended(len(entries))
}

// writer is the group commit: every append queued while one transaction
// commits goes into the next one, which starts MinCycle after the last one
// started, or as soon as as many entries wait as the largest recent
// transactions carried (internal/groupcommit: callers that each wait for
// their own append need not sit out the cycle once they are all back).
func (l *Log) writer() {
	defer close(l.writerDone)
	batch := make([]*request, 0, 64)
	var last time.Time // start of the previous cycle
	for r := range l.queue {
		size, count := r.bytes, len(r.entries)
		l.early.Taken(count)
		if wait := l.cfg.MinCycle - time.Since(last); wait > 0 {
			l.early.Wait(wait, count)
		}
		last = time.Now()
		batch = append(batch[:0], r)
	drain:
		for len(batch) < maxTxnAppends && size < maxTxnBytes {
			select {
			case r, ok := <-l.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
				l.early.Taken(len(r.entries))
				size += r.bytes
				count += len(r.entries)
			default:
				break drain
			}
		}
		l.early.Committed(count)
		l.cycle(batch)
		clear(batch)
	}
}

// cycle commits one batch of appends in one transaction and reports each.
func (l *Log) cycle(batch []*request) {
	if l.err == nil {
		l.cfg.Metrics.observeCycle(len(batch))
		l.err = l.commit(batch)
	}
	now := time.Now()
	for _, r := range batch {
		if l.err != nil {
			r.done(0, 0, l.err)
			continue
		}
		first := cmdlog.Position(r.recs[0].Offset)
		end := cmdlog.Position(r.recs[len(r.recs)-1].Offset + 1)
		l.cfg.Metrics.observeWait(now.Sub(r.queued))
		r.done(first, end, nil)
	}
}

// commit produces one record per append (more only for a very large one)
// in one transaction and commits it.
func (l *Log) commit(batch []*request) error {
	if err := checkEntries(batch); err != nil {
		return fmt.Errorf("kafkalog: partition %d: append refused, nothing was written: %w", l.partition, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TxnTimeout)
	defer cancel()
	if err := l.cl.BeginTransaction(); err != nil {
		return l.failure(err)
	}
	_, epoch, err := l.cl.ProducerID(ctx)
	if err != nil {
		return l.abort(err)
	}
	headers := []kgo.RecordHeader{
		{Key: headerNode, Value: []byte(l.cfg.NodeID)},
		{Key: headerEpoch, Value: strconv.AppendInt(nil, int64(epoch), 10)},
	}
	var datas [][]byte
	var recs []*kgo.Record
	for _, r := range batch {
		datas = datas[:0]
		for _, e := range r.entries {
			datas = append(datas, e.Data)
		}
		r.recs = r.recs[:0]
		for _, v := range packEntries(datas, maxRecordBytes) {
			rec := &kgo.Record{Partition: l.partition, Value: v, Headers: headers}
			r.recs = append(r.recs, rec)
			recs = append(recs, rec)
		}
	}
	if len(recs) == 0 {
		return l.abort(errors.New("kafkalog: a cycle with no entries"))
	}
	// The first record goes alone and is acknowledged before the rest are
	// produced. Kafka answers a transaction's first produce with the
	// retriable CONCURRENT_TRANSACTIONS while the previous transaction's
	// markers are still being written; a second batch already in flight
	// then gets OUT_OF_ORDER_SEQUENCE_NUMBER, which is fatal to a
	// transactional producer (the test appending one large entry right
	// after Open's marker hit it on a busy machine).
	for _, part := range [][]*kgo.Record{recs[:1], recs[1:]} {
		if err := l.produce(ctx, part); err != nil {
			// franz-go would commit the records that did succeed; that
			// would leave a hole in the middle of what the engine applied.
			return l.abort(err)
		}
	}
	if l.beforeCommit != nil {
		l.beforeCommit()
	}
	// A fresh context: the commit must not be cut short by time the
	// produce used up, since a cancelled commit's outcome is unknown.
	ectx, ecancel := context.WithTimeout(context.Background(), l.cfg.TxnTimeout)
	defer ecancel()
	if err := l.cl.EndTransaction(ectx, kgo.TryCommit); err != nil {
		if isFenced(err) {
			return l.fenced(err)
		}
		return fmt.Errorf("kafkalog: partition %d: %w: %w", l.partition, ErrCommitUnknown, err)
	}
	return nil
}

// produce sends recs and waits for them: the first error of any, or of
// the flush.
func (l *Log) produce(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	var (
		errMu    sync.Mutex
		firstErr error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
		}
	}
	for _, rec := range recs {
		l.cl.Produce(ctx, rec, promise)
	}
	if err := l.cl.Flush(ctx); err != nil {
		return err
	}
	errMu.Lock()
	defer errMu.Unlock()
	return firstErr
}

// checkEntries refuses entries no record may hold, before anything of the
// cycle is produced.
func checkEntries(batch []*request) error {
	for _, r := range batch {
		for _, e := range r.entries {
			if len(e.Data) > cmdlog.MaxEntryBytes {
				return fmt.Errorf("%w: an entry of %d bytes; the limit is %d", ErrEntryTooLarge, len(e.Data), cmdlog.MaxEntryBytes)
			}
		}
	}
	return nil
}

// abort ends a transaction that must not commit. Whether or not the abort
// reaches Kafka, nothing of it can become durable: only EndTransaction with
// commit could do that, and it is never sent for this transaction.
func (l *Log) abort(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TxnTimeout)
	defer cancel()
	aerr := l.cl.AbortBufferedRecords(ctx)
	if aerr == nil {
		aerr = l.cl.EndTransaction(ctx, kgo.TryAbort)
	}
	if !isFenced(cause) && isFenced(aerr) {
		return l.fenced(aerr)
	}
	return l.failure(cause)
}

func (l *Log) failure(err error) error {
	if isFenced(err) {
		return l.fenced(err)
	}
	return fmt.Errorf("kafkalog: partition %d: append failed and was not committed: %w", l.partition, err)
}

func (l *Log) fenced(err error) error {
	return fmt.Errorf("kafkalog: partition %d: %w: %w", l.partition, cmdlog.ErrFenced, err)
}

// isFenced tells whether Kafka refused this producer because another one
// initialised the same transactional id (or its epoch otherwise moved on,
// as when Kafka aborted a transaction that outlived its timeout: either
// way this producer's transaction is gone and it must stop).
func isFenced(err error) bool {
	return err != nil && (errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed))
}

// Replay calls fn for every entry at or after from that was durable when
// the log was opened, in order. It reads with read_committed, so aborted
// transactions and fenced owners' unfinished appends are never seen.
func (l *Log) Replay(from cmdlog.Position, fn func(pos cmdlog.Position, e cmdlog.Entry) error) error {
	if int64(from) >= l.marker {
		return nil
	}
	// Records before the log start were deleted: refuse before reading,
	// not only when the fetch says so. Once (in CI, two brokers on two
	// cores) a replay from before a DeleteRecords start read on without
	// an error, which would rebuild a partition with its head missing.
	ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
	start, err := l.listStart(ctx)
	cancel()
	if err != nil {
		return err
	}
	if int64(from) < start {
		return fmt.Errorf("kafkalog: partition %d: replay from offset %d, but the log starts at %d: the records before it were deleted (retention or DeleteRecords)", l.partition, from, start)
	}
	return readPartition(l.ctx, l.cfg, l.topic, l.partition, int64(from), l.marker, true, func(r *kgo.Record) error {
		if hasHeader(r, headerMarker) {
			return nil
		}
		pos := cmdlog.Position(r.Offset)
		err := unpackEntries(r.Value, func(data []byte) error {
			return fn(pos, cmdlog.Entry{Partition: uint32(l.partition), Data: data})
		})
		if errors.Is(err, errBadRecord) {
			return fmt.Errorf("kafkalog: partition %d offset %d: %w", l.partition, r.Offset, err)
		}
		return err
	})
}

func hasHeader(r *kgo.Record, key string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}

func header(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// Start is the partition's log start offset. If Kafka cannot be asked, it
// is the last value learned (at worst too low, which a replay from below
// the real start then reports as an error).
func (l *Log) Start() cmdlog.Position {
	ctx, cancel := context.WithTimeout(l.ctx, 5*time.Second)
	defer cancel()
	if s, err := l.listStart(ctx); err == nil {
		l.start.Store(s)
	}
	return cmdlog.Position(l.start.Load())
}

// Marker is the offset of the ownership marker this owner committed when
// it opened the log: records after it are this owner's.
func (l *Log) Marker() int64 { return l.marker }

// Close commits what is queued (unless the log has failed), then closes
// the client. Appends after Close get cmdlog.ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.writerDone
	l.cancel()
	l.cl.Close()
	return nil
}

// readStall is how long a read may go without a record, short of its
// end, before it is given up with an error: a reader waiting for an
// offset that read_committed never shows (a last stable offset held below
// it) would otherwise wait for ever, and a node would hang in recovery
// with nothing in its log to say why. Kafka aborts a dead owner's
// transaction within its timeout, so minutes without a record are not a
// slow broker. A variable for the tests.
var readStall = 2 * time.Minute

// readRestart is how long a read may go without a record while Kafka
// lists records past its position before it replaces its consumer with a
// new one (new connections, new fetch session) starting there. A working
// consumer shows the next record within about one fetch wait (franz-go's
// FetchMaxWait, 5 s by default) of its being listed, so waiting twice that
// restarts none that works; the stall it cuts short was seen once in CI,
// a replay that heard nothing for readStall while the last stable offset
// stood past the record it waited for. A variable for the tests.
var readRestart = 10 * time.Second

// readPoll is the longest one poll waits, so that a stall is noticed. A
// variable for the tests.
var readPoll = 5 * time.Second

// testReadClient, set only by tests, sees each consumer a read makes.
var testReadClient func(*kgo.Client)

// listedEnd is where a read's consumer should be able to get to: the last
// stable offset for read_committed, else the high watermark.
func listedEnd(ctx context.Context, cl *kgo.Client, topic string, partition int32, committed bool) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	list := adm.ListEndOffsets
	if committed {
		list = adm.ListCommittedOffsets
	}
	return listedOffset(ctx, list, topic, partition)
}

func listedOffset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, partition int32) (int64, error) {
	offs, err := list(ctx, topic)
	if err != nil {
		return 0, err
	}
	o, ok := offs.Lookup(topic, partition)
	if !ok {
		return 0, fmt.Errorf("no partition %d listed", partition)
	}
	return o.Offset, o.Err
}

// stallOffsets says where the partition's high watermark and last stable
// offset stand, for a stalled read's error: an LSO below the offset the
// read waits for while the high watermark is past it is a transaction
// held open (or its markers not yet written); both below it, records
// that never came.
func stallOffsets(ctx context.Context, cl *kgo.Client, topic string, partition int32) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	at := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) string {
		o, err := listedOffset(ctx, list, topic, partition)
		if err != nil {
			return "unknown (" + err.Error() + ")"
		}
		return strconv.FormatInt(o, 10)
	}
	return "high watermark " + at(adm.ListEndOffsets) + ", last stable offset " + at(adm.ListCommittedOffsets)
}

// readPartition calls fn for each record of topic/partition with an offset
// in [from, until] that the isolation level shows (committed:
// read_committed), in order. It ends at until, or at the first record or
// transaction marker past it: the consumer has then shown everything up
// to until, so an until whose transaction aborted does not hold the read.
// until should be a record that is there: a read that sees nothing for
// readStall short of it ends with an error.
func readPartition(ctx context.Context, cfg Config, topic string, partition int32, from, until int64, committed bool, fn func(*kgo.Record) error) error {
	cfg = cfg.withDefaults() // for its Logger
	newClient := func(at int64) (*kgo.Client, error) {
		opts := []kgo.Opt{
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
				topic: {partition: kgo.NewOffset().At(at)},
			}),
			// Reading from a position retention has deleted must fail, not
			// silently start at whatever is left.
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
			// Transaction markers are not passed to fn, but they tell
			// how far the consumer has read: read_committed shows no
			// record of an aborted transaction, only its marker, and a
			// consumer past until has shown everything up to it.
			kgo.KeepControlRecords(),
			kgo.WithLogger(KgoLogger(cfg.Logger, "kafka: ")),
		}
		if committed {
			opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		}
		cl, err := cfg.NewClient(opts...)
		if err == nil && testReadClient != nil {
			testReadClient(cl)
		}
		return cl, err
	}
	cl, err := newClient(from)
	if err != nil {
		return err
	}
	defer func() { cl.Close() }()
	// next is the consumer's position as far as its records tell: every
	// record before it that the isolation level shows has been seen.
	next := from
	last := time.Now() // of the last record, or the last restart
	lastRecord, restarts := last, 0
	for {
		pctx, cancel := context.WithTimeout(ctx, readPoll)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := fetches.Err0(); err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("kafkalog: reading %s partition %d from offset %d: %w", topic, partition, from, err)
			}
			// Only this poll's wait ran out.
			if time.Since(lastRecord) >= readStall {
				return fmt.Errorf("kafkalog: reading %s partition %d: no record for %v at offset %d, short of %d (a transaction left open holds what read_committed may show, or the broker stopped answering; consumer restarted %d times; %s)",
					topic, partition, readStall, next, until, restarts, stallOffsets(ctx, cl, topic, partition))
			}
			if time.Since(last) < readRestart {
				continue
			}
			last = time.Now()
			// Records past next are there for the consumer to show, and it
			// has shown nothing: a new consumer (new connections, new fetch
			// session) starts at next. It cannot skip anything, and a record
			// it shows twice is dropped below.
			end, err := listedEnd(ctx, cl, topic, partition, committed)
			if err != nil || end <= next {
				continue
			}
			cfg.Logger.Warn("kafkalog: a read got no record while the partition has more; restarting its consumer",
				"topic", topic, "partition", partition, "offset", next, "until", until, "listed_end", end, "quiet", time.Since(lastRecord).Round(time.Millisecond))
			fresh, err := newClient(next)
			if err != nil {
				return err
			}
			cl.Close()
			cl = fresh
			restarts++
			continue
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("kafkalog: reading %s partition %d from offset %d: %w", topic, partition, from, ferr)
		}
		progressed := false
		for iter := fetches.RecordIter(); !iter.Done(); {
			r := iter.Next()
			if r.Offset < next {
				continue
			}
			next, progressed = r.Offset+1, true
			if r.Offset > until {
				if committed {
					// Harmless to the read (everything before until that
					// read_committed shows has been seen), but until was
					// meant to be a committed record.
					cfg.Logger.Warn("kafkalog: a read passed its end without seeing it: the record there is not committed",
						"topic", topic, "partition", partition, "until", until, "offset", r.Offset)
				}
				return nil
			}
			if !r.Attrs.IsControl() {
				if err := fn(r); err != nil {
					return err
				}
			}
			if r.Offset == until {
				return nil
			}
		}
		if progressed {
			// One clock reading per fetch; the waits are checked only
			// when a poll comes back empty.
			last = time.Now()
			lastRecord = last
		}
	}
}
