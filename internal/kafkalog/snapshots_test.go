package kafkalog

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/cmdlog"
)

func snapData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openSnaps(t *testing.T, cfg Config) *Snapshots {
	t.Helper()
	s, err := OpenSnapshots(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func wantLatest(t *testing.T, s *Snapshots, p uint32, pos cmdlog.Position, data []byte) {
	t.Helper()
	gpos, gdata, ok, err := s.Latest(p)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatalf("partition %d: no snapshot, want pos %d", p, pos)
	}
	if gpos != pos || !bytes.Equal(gdata, data) {
		t.Fatalf("partition %d: got pos %d (%d bytes), want pos %d (%d bytes)", p, gpos, len(gdata), pos, len(data))
	}
}

func TestSnapshotsRoundTripAcrossChunks(t *testing.T) {
	cfg := testCluster(t, 2)
	s := openSnaps(t, cfg)
	if _, _, ok, err := s.Latest(1); ok || err != nil {
		t.Fatalf("empty partition: ok=%v err=%v", ok, err)
	}
	d1 := snapData(1_300_000, 1) // three chunks, the last one partial
	if err := s.Write(1, 100, d1); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, s, 1, 100, d1)
	d2 := snapData(snapshotChunkBytes, 2) // exactly one chunk
	if err := s.Write(1, 200, d2); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, s, 1, 200, d2)
	if err := s.Write(1, 300, nil); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, s, 1, 300, []byte{})

	// Another node, knowing nothing, finds the same and writes into the
	// slot that does not hold it.
	s2 := openSnaps(t, cfg)
	wantLatest(t, s2, 1, 300, []byte{})
	d4 := snapData(700_000, 4)
	if err := s2.Write(1, 400, d4); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, s, 1, 400, d4)
	if _, _, ok, _ := s.Latest(0); ok {
		t.Fatal("partition 0 has a snapshot it was never given")
	}
}

// produceRaw writes snapshot records the way a crashed or buggy writer
// would have left them.
func produceRaw(t *testing.T, s *Snapshots, p uint32, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	for _, r := range recs {
		r.Partition = int32(p)
	}
	if err := s.cl.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func rawChunk(slot, index int, id uint64, data []byte) *kgo.Record {
	h := make([]byte, chunkHeaderBytes)
	h[0] = snapshotVersion
	binary.BigEndian.PutUint64(h[1:], id)
	binary.BigEndian.PutUint32(h[9:], uint32(index))
	return &kgo.Record{Key: chunkKey(slot, index), Value: data, Headers: []kgo.RecordHeader{{Key: headerSnapChunk, Value: h}}}
}

func TestSnapshotsIgnoreHalfWrittenAndCorrupt(t *testing.T) {
	cfg := testCluster(t, 1)
	s := openSnaps(t, cfg)
	d1 := snapData(1_100_000, 7)
	if err := s.Write(0, 100, d1); err != nil { // slot 0
		t.Fatal(err)
	}
	d2 := snapData(900_000, 8)
	if err := s.Write(0, 200, d2); err != nil { // slot 1
		t.Fatal(err)
	}
	wantLatest(t, s, 0, 200, d2)

	// A newer snapshot that died before its manifest: its chunks replace
	// slot 0's, whose old manifest must not be believed any more.
	half := snapData(2*snapshotChunkBytes, 9)
	produceRaw(t, s, 0, rawChunk(0, 0, 12345, half[:snapshotChunkBytes]), rawChunk(0, 1, 12345, half[snapshotChunkBytes:]))
	wantLatest(t, s, 0, 200, d2)

	// The next write goes into slot 0 again and becomes the latest.
	d3 := snapData(600_000, 10)
	if err := s.Write(0, 300, d3); err != nil {
		t.Fatal(err)
	}
	wantLatest(t, openSnaps(t, cfg), 0, 300, d3)

	// A complete-looking snapshot at a higher position whose data does
	// not match its checksum (chunks whole, one byte flipped) is passed
	// over: slot 1 (pos 200) is the newest sound one left.
	bad := snapData(snapshotChunkBytes+10, 11)
	m := manifest{id: 999, pos: 500, chunks: 2, chunkSize: snapshotChunkBytes, total: uint64(len(bad)), crc: crc32.Checksum(bad, castagnoli)}
	flipped := bytes.Clone(bad)
	flipped[5] ^= 1
	recs := produceRaw(t, s, 0, rawChunk(0, 0, 999, flipped[:snapshotChunkBytes]), rawChunk(0, 1, 999, flipped[snapshotChunkBytes:]))
	m.firstOffset = recs[0].Offset
	produceRaw(t, s, 0, &kgo.Record{Key: manifestKey(0), Value: m.encode()})
	wantLatest(t, openSnaps(t, cfg), 0, 200, d2)
}

// A key read from the snapshot topic, whatever it is, is refused or names
// slot 0 or 1 and a chunk index (or -1 for the manifest).
func FuzzParseKey(f *testing.F) {
	f.Add(chunkKey(1, 12))
	f.Add([]byte("0/m"))
	f.Add([]byte("2/-1"))
	f.Fuzz(func(t *testing.T, k []byte) {
		slot, index, ok := parseKey(k)
		if ok && (slot < 0 || slot > 1 || index < -1) {
			t.Fatalf("%q parsed as slot %d index %d", k, slot, index)
		}
	})
}
