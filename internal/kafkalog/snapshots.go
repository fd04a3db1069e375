package kafkalog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Snapshot layout in the compacted snapshot topic, partition = Surge
// partition. Each partition has two slots, written alternately, so a crash
// half-way through writing one leaves the other whole. A snapshot is its
// chunks, keys "<slot>/<index>", then a manifest, key "<slot>/m", written
// after every chunk was acknowledged:
//
//	chunk:    value = the data itself; header surge-snap = version | snapshot id (8) | index (4)
//	manifest: version | snapshot id (8) | pos (8) | chunks (4) | chunk size (4)
//	          | total length (8) | CRC-32C of the data (4) | offset of chunk 0 (8)
//	          | written at, Unix ns (8)
//
// The id ties chunks to their manifest: a newer snapshot that died half-way
// overwrites some keys of its slot, and compaction may then drop the older
// chunks those keys held, so a manifest counts only if the newest record of
// each of its chunk keys carries its id.
const (
	snapshotVersion    = 1
	snapshotChunkBytes = 512 << 10
	chunkHeaderBytes   = 1 + 8 + 4
	headerSnapChunk    = "surge-snap"
	manifestBytes      = 1 + 8 + 8 + 4 + 4 + 8 + 4 + 8 + 8
	// snapshotMessageBytes is the largest record batch the snapshot
	// producer writes (one chunk and its framing); the snapshot topic must
	// take it.
	snapshotMessageBytes = snapshotChunkBytes + recordOverheadBytes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshots stores partition snapshots in the cluster's snapshot topic. It
// implements the engine's SnapshotStore.
type Snapshots struct {
	cfg   Config
	topic string
	cl    *kgo.Client
	adm   *kadm.Client

	mu    sync.Mutex
	parts map[uint32]*snapPartition
}

// snapPartition serialises the writes of one partition and remembers which
// slot holds its newest complete snapshot, so the next write takes the
// other.
type snapPartition struct {
	mu       sync.Mutex
	slot     int
	slotKnow bool
}

// OpenSnapshots connects to the snapshot topic (EnsureTopics creates it).
func OpenSnapshots(ctx context.Context, cfg Config) (*Snapshots, error) {
	cfg = cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	topic := cfg.SnapshotTopic()
	cl, err := cfg.NewClient(
		kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(snapshotMessageBytes),
		kgo.ProducerLinger(0),
		kgo.WithLogger(KgoLogger(cfg.Logger, "kafka: ")),
	)
	if err != nil {
		return nil, err
	}
	s := &Snapshots{cfg: cfg, topic: topic, cl: cl, adm: kadm.NewClient(cl), parts: map[uint32]*snapPartition{}}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafkalog: reaching Kafka at %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	return s, nil
}

// String names the store, for error messages.
func (s *Snapshots) String() string {
	return "kafka topic " + s.topic + " at " + strings.Join(s.cfg.Brokers, ",")
}

// Close closes the client.
func (s *Snapshots) Close() { s.cl.Close() }

func (s *Snapshots) part(p uint32) *snapPartition {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.parts[p]
	if sp == nil {
		sp = &snapPartition{}
		s.parts[p] = sp
	}
	return sp
}

func chunkKey(slot, index int) []byte { return []byte(strconv.Itoa(slot) + "/" + strconv.Itoa(index)) }
func manifestKey(slot int) []byte     { return []byte(strconv.Itoa(slot) + "/m") }

type manifest struct {
	slot        int
	offset      int64 // the manifest record's own offset
	id          uint64
	pos         cmdlog.Position
	chunks      uint32
	chunkSize   uint32
	total       uint64
	crc         uint32
	firstOffset int64
	writtenAt   int64
}

func (m manifest) encode() []byte {
	b := make([]byte, 0, manifestBytes)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, m.id)
	b = binary.BigEndian.AppendUint64(b, uint64(m.pos))
	b = binary.BigEndian.AppendUint32(b, m.chunks)
	b = binary.BigEndian.AppendUint32(b, m.chunkSize)
	b = binary.BigEndian.AppendUint64(b, m.total)
	b = binary.BigEndian.AppendUint32(b, m.crc)
	b = binary.BigEndian.AppendUint64(b, uint64(m.firstOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(m.writtenAt))
	return b
}

func decodeManifest(v []byte) (manifest, bool) {
	if len(v) != manifestBytes || v[0] != snapshotVersion {
		return manifest{}, false
	}
	v = v[1:]
	m := manifest{
		id:          binary.BigEndian.Uint64(v[0:]),
		pos:         cmdlog.Position(binary.BigEndian.Uint64(v[8:])),
		chunks:      binary.BigEndian.Uint32(v[16:]),
		chunkSize:   binary.BigEndian.Uint32(v[20:]),
		total:       binary.BigEndian.Uint64(v[24:]),
		crc:         binary.BigEndian.Uint32(v[32:]),
		firstOffset: int64(binary.BigEndian.Uint64(v[36:])),
		writtenAt:   int64(binary.BigEndian.Uint64(v[44:])),
	}
	// The chunk layout must add up, or assembling would index out of
	// range.
	if m.chunkSize == 0 || uint64(m.chunks) != (m.total+uint64(m.chunkSize)-1)/uint64(m.chunkSize) {
		return manifest{}, false
	}
	return m, true
}

// parseKey splits "<slot>/<index>" or "<slot>/m" (index -1).
func parseKey(k []byte) (slot, index int, ok bool) {
	a, b, found := strings.Cut(string(k), "/")
	if !found || (a != "0" && a != "1") {
		return 0, 0, false
	}
	slot = int(a[0] - '0')
	if b == "m" {
		return slot, -1, true
	}
	i, err := strconv.Atoi(b)
	if err != nil || i < 0 {
		return 0, 0, false
	}
	return slot, i, true
}

// Write stores data as partition's snapshot at pos, in the slot that does
// not hold the newest complete snapshot. The data is sent chunk by chunk
// straight from the caller's slice.
func (s *Snapshots) Write(partition uint32, pos cmdlog.Position, data []byte) error {
	sp := s.part(partition)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SnapshotTimeout)
	defer cancel()
	if !sp.slotKnow {
		best, _, err := s.scan(ctx, partition)
		if err != nil {
			return err
		}
		sp.slot = 1 // so that an empty partition starts with slot 0
		if best != nil {
			sp.slot = best[0].slot
		}
		sp.slotKnow = true
	}
	slot := 1 - sp.slot

	m := manifest{
		slot:      slot,
		id:        rand.Uint64(),
		pos:       pos,
		chunkSize: snapshotChunkBytes,
		total:     uint64(len(data)),
		crc:       crc32.Checksum(data, castagnoli),
		writtenAt: time.Now().UnixNano(),
	}
	m.chunks = uint32((len(data) + snapshotChunkBytes - 1) / snapshotChunkBytes)
	first, err := s.produceChunks(ctx, partition, &m, data)
	if err != nil {
		return fmt.Errorf("kafkalog: writing snapshot of partition %d: %w", partition, err)
	}
	m.firstOffset = -1
	if first != nil {
		m.firstOffset = first.Offset
	}
	mrec := &kgo.Record{Partition: int32(partition), Key: manifestKey(slot), Value: m.encode()}
	if err := s.cl.ProduceSync(ctx, mrec).FirstErr(); err != nil {
		return fmt.Errorf("kafkalog: writing snapshot manifest of partition %d: %w", partition, err)
	}
	sp.slot = slot
	return nil
}

// produceChunks sends data as m's chunks and waits until every one is
// written; it returns the first chunk's record (nil for empty data), whose
// offset the manifest points at.
func (s *Snapshots) produceChunks(ctx context.Context, partition uint32, m *manifest, data []byte) (*kgo.Record, error) {
	var (
		errMu    sync.Mutex
		firstErr error
	)
	var first *kgo.Record
	for i := 0; i < int(m.chunks); i++ {
		lo, hi := i*snapshotChunkBytes, min((i+1)*snapshotChunkBytes, len(data))
		h := make([]byte, chunkHeaderBytes)
		h[0] = snapshotVersion
		binary.BigEndian.PutUint64(h[1:], m.id)
		binary.BigEndian.PutUint32(h[9:], uint32(i))
		// The value is the caller's slice itself (Write returns only after
		// every chunk was sent), so the snapshot is never copied whole.
		rec := &kgo.Record{
			Partition: int32(partition),
			Key:       chunkKey(m.slot, i),
			Value:     data[lo:hi],
			Headers:   []kgo.RecordHeader{{Key: headerSnapChunk, Value: h}},
		}
		if i == 0 {
			first = rec
		}
		s.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				errMu.Unlock()
			}
		})
	}
	if err := s.cl.Flush(ctx); err != nil {
		return nil, err
	}
	errMu.Lock()
	defer errMu.Unlock()
	return first, firstErr
}

// Latest returns partition's complete snapshot with the highest position.
// A snapshot whose manifest is missing, whose chunks were overwritten, or
// whose checksum does not match is passed over for the other slot's.
func (s *Snapshots) Latest(partition uint32) (cmdlog.Position, []byte, bool, error) {
	sp := s.part(partition)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SnapshotTimeout)
	defer cancel()
	cands, newest, err := s.scan(ctx, partition)
	if err != nil {
		return 0, nil, false, err
	}
	for _, m := range cands {
		data, ok, err := s.assemble(ctx, partition, m, newest)
		if err != nil {
			return 0, nil, false, err
		}
		if ok {
			sp.slot, sp.slotKnow = m.slot, true
			return m.pos, data, true, nil
		}
		s.cfg.Logger.Warn("kafkalog: snapshot does not match its checksum; using an older one",
			"partition", partition, "slot", m.slot, "pos", m.pos, "manifest_offset", m.offset)
	}
	return 0, nil, false, nil
}

// scan reads the partition's snapshot records and returns the complete
// candidates, highest position first, and the offset of the newest record
// of each chunk key.
func (s *Snapshots) scan(ctx context.Context, partition uint32) ([]manifest, map[string]chunkRef, error) {
	lo, hi, err := s.bounds(ctx, partition)
	if err != nil || lo >= hi {
		return nil, nil, err
	}
	var manifests [2]*manifest
	newest := map[string]chunkRef{}
	err = readPartition(ctx, s.cfg, s.topic, int32(partition), lo, hi-1, false, func(r *kgo.Record) error {
		slot, index, ok := parseKey(r.Key)
		if !ok {
			return nil
		}
		if index < 0 {
			m, ok := decodeManifest(r.Value)
			if !ok {
				manifests[slot] = nil // a newer, unreadable manifest replaces the slot's
				return nil
			}
			m.slot, m.offset = slot, r.Offset
			manifests[slot] = &m
			return nil
		}
		ref := chunkRef{offset: r.Offset}
		if h := header(r, headerSnapChunk); len(h) == chunkHeaderBytes && h[0] == snapshotVersion {
			ref.id = binary.BigEndian.Uint64(h[1:])
			ref.valid = binary.BigEndian.Uint32(h[9:]) == uint32(index)
		}
		newest[string(r.Key)] = ref
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var cands []manifest
	for _, m := range manifests {
		if m != nil && complete(*m, newest) {
			cands = append(cands, *m)
		}
	}
	if len(cands) == 2 && cands[1].pos > cands[0].pos {
		cands[0], cands[1] = cands[1], cands[0]
	}
	return cands, newest, nil
}

type chunkRef struct {
	offset int64
	id     uint64
	valid  bool
}

func complete(m manifest, newest map[string]chunkRef) bool {
	for i := 0; i < int(m.chunks); i++ {
		ref, ok := newest[string(chunkKey(m.slot, i))]
		if !ok || !ref.valid || ref.id != m.id || ref.offset < m.firstOffset || ref.offset > m.offset {
			return false
		}
	}
	return true
}

// assemble reads m's chunks into one buffer and checks it against m's CRC.
func (s *Snapshots) assemble(ctx context.Context, partition uint32, m manifest, newest map[string]chunkRef) ([]byte, bool, error) {
	data := make([]byte, m.total)
	if m.chunks == 0 {
		return data, crc32.Checksum(data, castagnoli) == m.crc, nil
	}
	got := 0
	err := readPartition(ctx, s.cfg, s.topic, int32(partition), m.firstOffset, m.offset, false, func(r *kgo.Record) error {
		slot, index, ok := parseKey(r.Key)
		if !ok || slot != m.slot || index < 0 || index >= int(m.chunks) || newest[string(r.Key)].offset != r.Offset {
			return nil
		}
		chunk := r.Value
		lo := uint64(index) * uint64(m.chunkSize)
		want := min(uint64(m.chunkSize), m.total-lo)
		if uint64(len(chunk)) != want {
			return errShortChunk
		}
		copy(data[lo:], chunk)
		got++
		return nil
	})
	if errors.Is(err, errShortChunk) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if got != int(m.chunks) || crc32.Checksum(data, castagnoli) != m.crc {
		return nil, false, nil
	}
	return data, true, nil
}

var errShortChunk = errors.New("kafkalog: snapshot chunk has the wrong length")

// bounds returns the partition's start and end offsets.
func (s *Snapshots) bounds(ctx context.Context, partition uint32) (lo, hi int64, err error) {
	starts, err := s.adm.ListStartOffsets(ctx, s.topic)
	if err != nil {
		return 0, 0, fmt.Errorf("kafkalog: listing %s offsets: %w", s.topic, err)
	}
	ends, err := s.adm.ListEndOffsets(ctx, s.topic)
	if err != nil {
		return 0, 0, fmt.Errorf("kafkalog: listing %s offsets: %w", s.topic, err)
	}
	st, ok1 := starts.Lookup(s.topic, int32(partition))
	en, ok2 := ends.Lookup(s.topic, int32(partition))
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("kafkalog: topic %s has no partition %d", s.topic, partition)
	}
	if st.Err != nil {
		return 0, 0, fmt.Errorf("kafkalog: listing %s offsets: %w", s.topic, st.Err)
	}
	if en.Err != nil {
		return 0, 0, fmt.Errorf("kafkalog: listing %s offsets: %w", s.topic, en.Err)
	}
	return st.Offset, en.Offset, nil
}
