package jobs

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// NewJobID draws a random version-4 UUID from rnd whose job key hashes to
// the partition of queue's key, so that every later command about the
// job is routed by its id alone (see the package comment). rnd is a
// ChaCha8 source seeded from crypto/rand in the server and a seeded
// source in tests.
//
// It runs for every submit, so a draw is cheap: the key "j/"+id is hashed
// (FNV-1a, byte by byte) up to the UUID's last byte once, and then only
// that byte is drawn again until the key lands in the partition: on
// average partitions tries of two hash steps each, where drawing,
// formatting and hashing whole UUIDs until one landed was a thirtieth of
// the server's CPU per unary SubmitJob. Every byte of the id is still
// random. Only the id kept is allocated.
func NewJobID(queue string, partitions int, rnd io.Reader) (string, error) {
	var id [ids.Len]byte
	if err := PutJobID(&id, queue, partitions, rnd); err != nil {
		return "", err
	}
	return string(id[:]), nil
}

// PutJobID draws the id NewJobID would into dst, which allocates nothing:
// a unary submit keeps it beside its command (API.submitJob).
func PutJobID(dst *[ids.Len]byte, queue string, partitions int, rnd io.Reader) error {
	if partitions <= 0 {
		return fmt.Errorf("jobs: %d partitions", partitions)
	}
	want := engine.PartitionOfHash(engine.Hash(QueueKey(queue)), partitions)
	var key [2 + ids.Len]byte // "j/" + the UUID
	key[0], key[1] = 'j', '/'
	var b [16]byte
	// A bound keeps a broken reader from spinning for ever; with a good
	// one, a UUID draw whose last byte lands nowhere in 64 tries has
	// probability (1-1/n)^64, and 64n of those in a row never happen.
	for range 64 * partitions {
		if err := drawUUID(&b, rnd); err != nil {
			return err
		}
		ids.V4(b).Put((*[ids.Len]byte)(key[2:]))
		prefix := ids.HashBytes(key[:len(key)-2])
		for range 64 {
			if engine.PartitionOfHash(ids.HashMore(prefix, string(key[len(key)-2:])), partitions) == want {
				copy(dst[:], key[2:])
				return nil
			}
			var last [1]byte
			if err := drawByte(&last, rnd); err != nil {
				return err
			}
			hexByte(key[len(key)-2:], last[0])
		}
	}
	return fmt.Errorf("jobs: no job id for queue %q's partition in %d draws", queue, 64*partitions)
}

// uint64Source is what a math/rand/v2 source (ChaCha8) offers beside
// Read: drawing through it keeps the buffers on the stack.
type uint64Source interface{ Uint64() uint64 }

func drawUUID(b *[16]byte, rnd io.Reader) error {
	if s, ok := rnd.(uint64Source); ok {
		binary.LittleEndian.PutUint64(b[:8], s.Uint64())
		binary.LittleEndian.PutUint64(b[8:], s.Uint64())
		return nil
	}
	var buf [16]byte
	if _, err := io.ReadFull(rnd, buf[:]); err != nil {
		return fmt.Errorf("jobs: drawing a job id: %w", err)
	}
	*b = buf
	return nil
}

func drawByte(b *[1]byte, rnd io.Reader) error {
	if s, ok := rnd.(uint64Source); ok {
		b[0] = byte(s.Uint64())
		return nil
	}
	var buf [1]byte
	if _, err := io.ReadFull(rnd, buf[:]); err != nil {
		return fmt.Errorf("jobs: drawing a job id: %w", err)
	}
	b[0] = buf[0]
	return nil
}

const hexDigits = "0123456789abcdef"

// hexByte writes c as two lower-case hex digits, as ids.UUID.Put does.
func hexByte(dst []byte, c byte) {
	dst[0], dst[1] = hexDigits[c>>4], hexDigits[c&0x0f]
}
