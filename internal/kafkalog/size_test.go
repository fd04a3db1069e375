package kafkalog

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/surge-run/surge/internal/cmdlog"
)

func appendWait(l *Log, entries []cmdlog.Entry) (first cmdlog.Position, err error) {
	done := make(chan struct{})
	l.Append(entries, func(f, _ cmdlog.Position, e error) {
		first, err = f, e
		close(done)
	})
	<-done
	return first, err
}

// The log takes an entry of the largest size the engine hands it, and
// gives it back whole; a larger one fails its append with an error that
// names the limit, before anything reaches Kafka.
func TestLargestEntryIsAppendedAndReplayed(t *testing.T) {
	cfg := testCluster(t, 1)
	l, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := bytes.Repeat([]byte("0123456789abcdef"), cmdlog.MaxEntryBytes/16)
	if len(big) != cmdlog.MaxEntryBytes {
		t.Fatalf("test entry of %d bytes", len(big))
	}
	entries := []cmdlog.Entry{{Data: []byte("before")}, {Data: big}, {Data: []byte("after")}}
	if _, err := appendWait(l, entries); err != nil {
		t.Fatalf("appending an entry of cmdlog.MaxEntryBytes: %v", err)
	}

	r, err := Open(ctxT(t), cfg, 0) // a new owner replays it
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got [][]byte
	if err := r.Replay(0, func(_ cmdlog.Position, e cmdlog.Entry) error {
		got = append(got, bytes.Clone(e.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Fatalf("replayed %d entries, want %d", len(got), len(entries))
	}
	for i := range entries {
		if !bytes.Equal(got[i], entries[i].Data) {
			t.Fatalf("entry %d: replayed %d bytes, want %d", i, len(got[i]), len(entries[i].Data))
		}
	}

	_, err = appendWait(r, []cmdlog.Entry{{Data: make([]byte, cmdlog.MaxEntryBytes+1)}})
	if !errors.Is(err, ErrEntryTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(cmdlog.MaxEntryBytes)) {
		t.Fatalf("an entry over the limit: got %v, want ErrEntryTooLarge naming %d", err, cmdlog.MaxEntryBytes)
	}
}

// A node meeting a log topic made elsewhere with Kafka's default record
// size limit refuses to start, and says what to change.
func TestEnsureTopicsRefusesATopicThatTakesTooLittle(t *testing.T) {
	cfg := testCluster(t, 1) // only for the brokers; a fresh name below
	cfg.Cluster += "-small"
	adm := testAdmin(t, cfg)
	const small = 1048588 // Kafka's default
	if _, err := adm.CreateTopic(ctxT(t), 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(small))}, cfg.LogTopic()); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureTopics(ctxT(t), adm, cfg)
	if err == nil {
		t.Fatal("EnsureTopics accepted a log topic whose max.message.bytes is 1 MB")
	}
	for _, want := range []string{cfg.LogTopic(), strconv.Itoa(small), strconv.Itoa(MaxMessageBytes), "max.message.bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}

	// Raised as the error says, the topic is taken.
	if _, err := adm.AlterTopicConfigs(ctxT(t), []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr(strconv.Itoa(MaxMessageBytes))}}, cfg.LogTopic()); err != nil {
		t.Fatal(err)
	}
	// The broker applies a config change a moment after it answers.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := EnsureTopics(ctxT(t), adm, cfg)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after raising max.message.bytes: %v", err)
		}
	}
}
