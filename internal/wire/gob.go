package wire

import (
	"bytes"
	"encoding/gob"
)

// In cluster mode queries, replies and notifications cross between nodes
// by gob, which carries only exported fields. A type that keeps state in
// unexported fields gives a GobEncode and GobDecode that move a struct of
// what crosses through these two.

// GobBytes encodes v with gob.
func GobBytes(v any) ([]byte, error) {
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(v)
	return buf.Bytes(), err
}

// FromGob decodes what GobBytes wrote into v, a pointer.
func FromGob(b []byte, v any) error { return gob.NewDecoder(bytes.NewReader(b)).Decode(v) }
