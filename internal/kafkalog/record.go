package kafkalog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/surge-run/surge/internal/cmdlog"
)

// A log record's value carries the entries of one Append (or a part of it):
//
//	version (1 byte) | count (uvarint) | count × (length (uvarint) | data)
//
// One record per append keeps the per-record overhead of Kafka (headers,
// offsets, transaction bookkeeping) off every single command.
const recordVersion = 1

// maxRecordBytes is what packEntries fills a record's value up to: small
// entries share records of moderate size (replay fetches them a few at a
// time); an entry larger than this gets a record of its own.
const maxRecordBytes = 900 << 10

// recordOverheadBytes bounds what a record batch adds to the largest
// value written into it: the value's own framing (version, count and
// length varints, at most 1+10+10 bytes), the record's framing, its
// headers (surge-node with a node id of at most MaxNodeIDBytes,
// surge-epoch, surge-snap) and the batch header (61 bytes). Generous on
// purpose: it is a few percent of the limits it is added to.
const recordOverheadBytes = 64 << 10

// MaxMessageBytes is the largest record batch the log's producer writes:
// one record holding a single entry of cmdlog.MaxEntryBytes. The log
// topic is created with max.message.bytes set to it, and a node refuses
// to start against an existing log topic that takes less.
const MaxMessageBytes = cmdlog.MaxEntryBytes + recordOverheadBytes

// MaxNodeIDBytes bounds Config.NodeID, which every record carries in a
// header (see recordOverheadBytes).
const MaxNodeIDBytes = 1024

// ErrEntryTooLarge is wrapped by the error an append's done gets when one
// of its entries is larger than cmdlog.MaxEntryBytes, which the engine
// never hands over. Like any failed append it stops the log (later
// batches were applied on top of it), but it names the cause instead of
// leaving Kafka to answer MESSAGE_TOO_LARGE.
var ErrEntryTooLarge = errors.New("kafkalog: log entry larger than the limit")

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
