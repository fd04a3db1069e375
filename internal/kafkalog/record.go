package kafkalog

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A log record's value carries the entries of one Append (or a part of it):
//
//	version (1 byte) | count (uvarint) | count × (length (uvarint) | data)
//
// One record per append keeps the per-record overhead of Kafka (headers,
// offsets, transaction bookkeeping) off every single command.
const recordVersion = 1

// maxRecordBytes keeps a record under the producer's and the broker's
// default size limits (1 MB) with room for headers and batch framing; an
// append larger than this is split over several records.
const maxRecordBytes = 900 << 10

// Header keys.
const (
	headerMarker = "surge-marker"
	headerNode   = "surge-node"
	headerEpoch  = "surge-epoch"
)

// packEntries splits datas into record values of at most maxBytes each
// (a single larger entry gets a value of its own).
func packEntries(datas [][]byte, maxBytes int) [][]byte {
	var out [][]byte
	for i := 0; i < len(datas); {
		size := 1 + binary.MaxVarintLen64
		j := i
		for j < len(datas) {
			n := uvarintLen(uint64(len(datas[j]))) + len(datas[j])
			if j > i && size+n > maxBytes {
				break
			}
			size += n
			j++
		}
		v := make([]byte, 0, size)
		v = append(v, recordVersion)
		v = binary.AppendUvarint(v, uint64(j-i))
		for _, d := range datas[i:j] {
			v = binary.AppendUvarint(v, uint64(len(d)))
			v = append(v, d...)
		}
		out = append(out, v)
		i = j
	}
	return out
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

var errBadRecord = errors.New("kafkalog: malformed log record")

// unpackEntries calls fn with each entry of a record value; the slices
// alias v.
func unpackEntries(v []byte, fn func(data []byte) error) error {
	if len(v) == 0 || v[0] != recordVersion {
		if len(v) == 0 {
			return fmt.Errorf("%w: empty value", errBadRecord)
		}
		return fmt.Errorf("%w: version %d, want %d", errBadRecord, v[0], recordVersion)
	}
	v = v[1:]
	count, n := binary.Uvarint(v)
	if n <= 0 {
		return fmt.Errorf("%w: bad entry count", errBadRecord)
	}
	v = v[n:]
	for i := uint64(0); i < count; i++ {
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			return fmt.Errorf("%w: entry %d of %d is cut off", errBadRecord, i, count)
		}
		if err := fn(v[n : n+int(l)]); err != nil {
			return err
		}
		v = v[n+int(l):]
	}
	if len(v) != 0 {
		return fmt.Errorf("%w: %d bytes after the last entry", errBadRecord, len(v))
	}
	return nil
}
