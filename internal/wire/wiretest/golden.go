// Package wiretest checks a workload's encodings against the bytes an
// earlier build wrote, so a change to a codec cannot change what is
// logged, or stop reading what was, unnoticed.
package wiretest

import (
	"bytes"
	"encoding"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteEnv names the environment variable that makes Golden write the
// files instead of checking them. Run by hand, with the build whose bytes
// are to be kept: CODEC_WRITE_GOLDEN=1 go test -run Golden ./internal/workload/...
const WriteEnv = "CODEC_WRITE_GOLDEN"

// Files in a golden directory: one hex line per command, and a snapshot.
const (
	commandsFile = "commands.hex"
	snapshotFile = "snapshot.bin"
)

// Codec is what Golden needs of a workload: its command decoder, and a
// restore that encodes what it restored.
type Codec struct {
	Decode  func([]byte) (encoding.BinaryAppender, error)
	Restore func([]byte) ([]byte, error)
}

// Golden checks that cmds encode to the lines of dir/commands.hex and snap
// is dir/snapshot.bin, both written by an earlier build, and that every
// one of those decodes (restores) and encodes back to its own bytes.
func Golden(t *testing.T, dir string, cmds []encoding.BinaryAppender, snap []byte, c Codec) {
	t.Helper()
	if os.Getenv(WriteEnv) != "" {
		write(t, dir, cmds, snap)
		t.Skipf("wrote %s", dir)
	}
	lines := readCommands(t, dir)
	if len(lines) != len(cmds) {
		t.Fatalf("%s holds %d commands, the test %d", dir, len(lines), len(cmds))
	}
	for i, want := range lines {
		if got, err := cmds[i].AppendBinary(nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("command %d (%T) encodes to %x, the earlier build wrote %x (%v)", i, cmds[i], got, want, err)
		}
		cmd, err := c.Decode(want)
		if err != nil {
			t.Errorf("command %d %x does not decode: %v", i, want, err)
			continue
		}
		if again, err := cmd.AppendBinary(nil); err != nil || !bytes.Equal(again, want) {
			t.Errorf("command %d (%T) %x re-encodes to %x (%v)", i, cmd, want, again, err)
		}
	}
	want, err := os.ReadFile(filepath.Join(dir, snapshotFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, want) {
		t.Errorf("the snapshot of the same state differs from the earlier build's (%d bytes, was %d)", len(snap), len(want))
	}
	again, err := c.Restore(want)
	if err != nil {
		t.Fatalf("the earlier build's snapshot does not restore: %v", err)
	}
	if !bytes.Equal(again, want) {
		t.Error("the earlier build's snapshot restores to a state that encodes differently")
	}
}

func readCommands(t *testing.T, dir string) [][]byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(dir, commandsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Fields(string(text)) {
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func write(t *testing.T, dir string, cmds []encoding.BinaryAppender, snap []byte) {
	t.Helper()
	var text strings.Builder
	for _, c := range cmds {
		b, err := c.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(hex.EncodeToString(b) + "\n")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, commandsFile), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotFile), snap, 0o644); err != nil {
		t.Fatal(err)
	}
}

// RoundTrip is the check of every FuzzDecode: data that decode accepts
// re-encodes to exactly data, so a logged record means one command. It
// returns the command, or nil if decode refused data.
func RoundTrip(t *testing.T, data []byte, decode func([]byte) (encoding.BinaryAppender, error)) encoding.BinaryAppender {
	t.Helper()
	cmd, err := decode(data)
	if err != nil {
		return nil
	}
	if again, err := cmd.AppendBinary(nil); err != nil || !bytes.Equal(again, data) {
		t.Fatalf("%T re-encodes to %x, was %x (%v)", cmd, again, data, err)
	}
	return cmd
}
