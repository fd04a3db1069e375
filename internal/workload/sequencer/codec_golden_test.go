package sequencer

import (
	"encoding"
	"testing"

	"github.com/surge-run/surge/internal/wire/wiretest"
)

// TestCodecGolden: the commands and a snapshot as the build before the
// shared wire.Coder wrote them (testdata/golden) are what this build
// writes for the same values, and read back to their own bytes.
func TestCodecGolden(t *testing.T) {
	var cmds []encoding.BinaryAppender
	cmds = append(cmds, seedCommands()...)
	wiretest.Golden(t, "testdata/golden", cmds, snapshotSeed(t), wiretest.Codec{
		Decode: Decode,
		Restore: func(b []byte) ([]byte, error) {
			m := NewMachine(Options{})
			err := m.Restore(b)
			return m.AppendSnapshot(nil), err
		},
	})
}
