package kafkalog

import (
	"bytes"
	"errors"
	"testing"
)

func TestPackUnpackSplitsLargeAppends(t *testing.T) {
	var datas [][]byte
	for i := range 300 {
		datas = append(datas, bytes.Repeat([]byte{byte(i)}, i*7))
	}
	datas = append(datas, bytes.Repeat([]byte{1}, 5000)) // larger than a record alone
	datas = append(datas, nil)
	const max = 4096
	vals := packEntries(datas, max)
	if len(vals) < 2 {
		t.Fatalf("got %d records, want the append split", len(vals))
	}
	var got [][]byte
	for i, v := range vals {
		if len(v) > max && !(len(v) > 5000 && len(v) < 5000+32) {
			t.Errorf("record %d has %d bytes, over the %d limit", i, len(v), max)
		}
		if err := unpackEntries(v, func(d []byte) error { got = append(got, bytes.Clone(d)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != len(datas) {
		t.Fatalf("got %d entries, want %d", len(got), len(datas))
	}
	for i := range datas {
		if !bytes.Equal(got[i], datas[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
}

func TestUnpackRejectsDamage(t *testing.T) {
	v := packEntries([][]byte{[]byte("hello"), []byte("world")}, maxRecordBytes)[0]
	for _, bad := range [][]byte{nil, {9}, v[:len(v)-1], append(bytes.Clone(v), 0)} {
		err := unpackEntries(bad, func([]byte) error { return nil })
		if !errors.Is(err, errBadRecord) {
			t.Errorf("%x: got %v, want errBadRecord", bad, err)
		}
	}
}

func TestManifestRoundTripAndLayoutCheck(t *testing.T) {
	m := manifest{id: 7, pos: 99, chunks: 3, chunkSize: 10, total: 25, crc: 5, firstOffset: 4, writtenAt: 1}
	got, ok := decodeManifest(m.encode())
	if !ok || got != m {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	m.chunks = 2 // 25 bytes do not fit in 2 chunks of 10
	if _, ok := decodeManifest(m.encode()); ok {
		t.Fatal("inconsistent chunk layout accepted")
	}
	for _, k := range []string{"0/1", "1/m", "2/0", "0/-1", "0", "x/m"} {
		s, i, ok := parseKey([]byte(k))
		t.Log(k, s, i, ok)
		want := k == "0/1" || k == "1/m"
		if ok != want {
			t.Errorf("parseKey(%q) ok=%v, want %v", k, ok, want)
		}
	}
}

// A record value from the log, whatever its bytes, is refused or split
// into entries that pack and unpack again to themselves.
func FuzzUnpackEntries(f *testing.F) {
	for _, v := range packEntries([][]byte{[]byte("a"), {}, []byte("bcd")}, maxRecordBytes) {
		f.Add(v)
	}
	f.Add([]byte{recordVersion, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{recordVersion, 2, 5, 'x'})
	f.Fuzz(func(t *testing.T, v []byte) {
		var got [][]byte
		err := unpackEntries(v, func(d []byte) error {
			got = append(got, d)
			return nil
		})
		if err != nil {
			return
		}
		if len(got) == 0 {
			return
		}
		// Packed again, the same entries come back.
		again := packEntries(got, 1<<30)
		var re [][]byte
		if err := unpackEntries(again[0], func(d []byte) error { re = append(re, d); return nil }); err != nil || len(again) != 1 || len(re) != len(got) {
			t.Fatalf("entries %q re-packed as %x: %d values, %d entries, %v", got, again, len(again), len(re), err)
		}
		for i := range re {
			if !bytes.Equal(re[i], got[i]) {
				t.Fatalf("entry %d: %q re-packed came back as %q", i, got[i], re[i])
			}
		}
	})
}

// A manifest from the snapshot topic, whatever its bytes, is refused or
// describes a chunk layout that adds up, and encodes back to itself.
func FuzzDecodeManifest(f *testing.F) {
	f.Add(manifest{id: 1, pos: 42, chunks: 3, chunkSize: 512 << 10, total: 1300000, crc: 7, firstOffset: 5, writtenAt: 9}.encode())
	f.Add(make([]byte, manifestBytes))
	f.Fuzz(func(t *testing.T, v []byte) {
		m, ok := decodeManifest(v)
		if !ok {
			return
		}
		if m.chunkSize == 0 || uint64(m.chunks)*uint64(m.chunkSize) < m.total {
			t.Fatalf("accepted a layout that does not add up: %+v", m)
		}
		if !bytes.Equal(m.encode(), v) {
			t.Fatalf("manifest %+v encodes to %x, not %x", m, m.encode(), v)
		}
	})
}
