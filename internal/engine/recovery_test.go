package engine_test

// Tests that pin the engine's fixes from the review: poison records
// (finding 2), snapshots that must cover released records (finding 3) and
// the per-batch bound on mailbox draining (finding 5).

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/wire"
)

// picky is a second test workload (id 9) with a command, pPoison, that
// encodes fine but never decodes: what a codec bug or a version skew
// between sender and receiver produces.
type picky struct{}

func (picky) ID() uint8    { return 9 }
func (picky) Name() string { return "picky" }
func (picky) NewMachine(int) engine.Machine {
	return &pickyState{sum: map[string]int64{}, n: map[string]int64{}}
}

type pickyState struct {
	sum, n  map[string]int64
	refused int64 // Send and SetTimer calls that returned an error
}

// pNote adds V to Key (as a client command, message or timer).
type pNote struct {
	Key string
	V   int64
}

// pFanout sends N notes of 1 to To, all from one Apply.
type pFanout struct {
	To string
	N  int
}

// pSendPoison sends pPoison to To, to this workload and to bank.
type pSendPoison struct{ To string }

// pTimerPoison sets a timer whose command is pPoison.
type pTimerPoison struct{ ID string }

// pTimerNote sets a timer that applies a note of 1 to Key.
type pTimerNote struct {
	ID, Key string
	AtNs    int64
}

// pPoison encodes to a tag no Decode accepts.
type pPoison struct{}

const poisonTag = 0xee

func (c *pNote) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 1)}
	w.Str(c.Key)
	w.U64(uint64(c.V))
	return w.B, nil
}
func (c *pFanout) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 2)}
	w.Str(c.To)
	w.U64(uint64(c.N))
	return w.B, nil
}
func (c *pSendPoison) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 3)}
	w.Str(c.To)
	return w.B, nil
}
func (c *pTimerPoison) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 4)}
	w.Str(c.ID)
	return w.B, nil
}
func (c *pTimerNote) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, 5)}
	w.Str(c.ID)
	w.Str(c.Key)
	w.U64(uint64(c.AtNs))
	return w.B, nil
}
func (c *pPoison) AppendBinary(b []byte) ([]byte, error) { return append(b, poisonTag), nil }

func (s *pickyState) Apply(in *engine.Input, fx *engine.Effects) {
	refuse := func(err error) string {
		if err != nil {
			s.refused++
			return "refused: " + err.Error()
		}
		return "accepted"
	}
	switch c := in.Cmd.(type) {
	case *pNote:
		s.sum[c.Key] += c.V
		s.n[c.Key]++
		fx.Reply("ok")
	case *pFanout:
		for range c.N {
			if err := fx.Send(c.To, 9, &pNote{Key: c.To, V: 1}); err != nil {
				panic(err)
			}
		}
		fx.Reply("ok")
	case *pSendPoison:
		fx.Reply([]string{refuse(fx.Send(c.To, 9, &pPoison{})), refuse(fx.Send(c.To, 7, &pPoison{}))})
	case *pTimerPoison:
		fx.Reply([]string{refuse(fx.SetTimer(c.ID, 0, &pPoison{}))})
	case *pTimerNote:
		if err := fx.SetTimer(c.ID, c.AtNs, &pNote{Key: c.Key, V: 1}); err != nil {
			panic(err)
		}
		fx.Reply("ok")
	case *pPoison:
		// Reached only if the engine applies a command it did not decode
		// from its log bytes.
		s.n["<poison>"]++
		fx.Reply("applied")
	default:
		panic(fmt.Sprintf("picky cannot apply %T", in.Cmd))
	}
}

type pGet struct{ Key string }
type pRefused struct{}

func (s *pickyState) Query(q any) any {
	switch q := q.(type) {
	case pGet:
		return [2]int64{s.sum[q.Key], s.n[q.Key]}
	case pRefused:
		return s.refused
	}
	return nil
}

func (s *pickyState) Decode(b []byte) (engine.Command, error) {
	if len(b) == 0 {
		return nil, errors.New("empty")
	}
	r := wire.Reader{B: b[1:]}
	var c engine.Command
	switch b[0] {
	case 1:
		c = &pNote{Key: r.Str(), V: int64(r.U64())}
	case 2:
		c = &pFanout{To: r.Str(), N: int(r.U64())}
	case 3:
		c = &pSendPoison{To: r.Str()}
	case 4:
		c = &pTimerPoison{ID: r.Str()}
	case 5:
		c = &pTimerNote{ID: r.Str(), Key: r.Str(), AtNs: int64(r.U64())}
	case poisonTag:
		return nil, errors.New("poison: this command never decodes")
	default:
		return nil, fmt.Errorf("tag %d", b[0])
	}
	return c, r.Err
}

func (s *pickyState) AppendSnapshot(dst []byte) []byte {
	w := wire.Writer{B: dst}
	names := slices.Sorted(maps.Keys(s.n))
	w.Uvarint(uint64(len(names)))
	for _, k := range names {
		w.Str(k)
		w.U64(uint64(s.sum[k]))
		w.U64(uint64(s.n[k]))
	}
	w.U64(uint64(s.refused))
	return w.B
}

func (s *pickyState) Restore(b []byte) error {
	r := wire.Reader{B: b}
	for n := r.Count(1); n > 0; n-- {
		k := r.Str()
		s.sum[k] = int64(r.U64())
		s.n[k] = int64(r.U64())
	}
	s.refused = int64(r.U64())
	return r.Err
}

// tryOpenBoth opens the bank and picky workloads on dir; mod may adjust
// the options and set o.Log. On error the log is closed.
func tryOpenBoth(t testing.TB, dir string, mod func(o *engine.Options)) (*engine.Engine, error) {
	t.Helper()
	sd, err := wal.OpenSnapshotDir(nil, filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	o := engine.Options{Partitions: 4, Snapshots: sd, Logger: quiet}
	if mod != nil {
		mod(&o)
	}
	if o.Log == nil {
		o.Log = openWAL(t, dir, o.Partitions)
	}
	e, err := engine.Open(o, bank{}, picky{})
	if err != nil {
		o.Log.Close()
	}
	return e, err
}

func openBoth(t testing.TB, dir string, mod func(o *engine.Options)) *engine.Engine {
	t.Helper()
	e, err := tryOpenBoth(t, dir, mod)
	if err != nil {
		t.Fatalf("engine.Open: %v", err)
	}
	return e
}

func withMetrics(reg *prometheus.Registry) func(o *engine.Options) {
	return func(o *engine.Options) { o.Metrics = engine.NewMetrics(reg) }
}

// keyOn returns a key that lives in partition p.
func keyOn(e *engine.Engine, p int, prefix string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s%d", prefix, i); e.PartitionOf(k) == p {
			return k
		}
	}
}

func pickyDo(t testing.TB, e *engine.Engine, key string, c engine.Command) any {
	t.Helper()
	v, err := e.Do(context.Background(), e.PartitionOf(key), 9, c)
	if err != nil {
		t.Fatalf("Do(%T): %v", c, err)
	}
	return v
}

// pickyGet returns the sum and count of notes applied to key.
func pickyGet(t testing.TB, e *engine.Engine, key string) (sum, n int64) {
	t.Helper()
	v, err := e.Query(context.Background(), e.PartitionOf(key), 9, pGet{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	a := v.([2]int64)
	return a[0], a[1]
}

// pickyWait waits until key has received want notes (never more).
func pickyWait(t testing.TB, e *engine.Engine, key string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, n := pickyGet(t, e, key)
		if n == want {
			return
		}
		if n > want || time.Now().After(deadline) {
			t.Fatalf("%q received %d notes, want %d", key, n, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func counterValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// envelope builds a log record by hand: envelope version 1, kind, workload,
// time, the kind's fields, then the payload (see codec.go).
func envelope(kind engine.InputKind, wl uint8, fields, payload []byte) []byte {
	b := []byte{1, byte(kind), wl}
	b = binary.LittleEndian.AppendUint64(b, uint64(time.Now().UnixNano()))
	return append(append(b, fields...), payload...)
}

func msgFields(src uint32, seq uint64) []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(nil, src), seq)
}

// logRecords returns every record the log in dir still holds.
func logRecords(t testing.TB, dir string) []cmdlog.Entry {
	t.Helper()
	lg := openWAL(t, dir, 4)
	defer lg.Close()
	start, _ := lg.Start()
	if start != 0 {
		t.Fatalf("the log was released up to %d; the test needs all of it", start)
	}
	var out []cmdlog.Entry
	err := lg.Replay(start, func(_ cmdlog.Position, en cmdlog.Entry) error {
		out = append(out, cmdlog.Entry{Partition: en.Partition, Data: slices.Clone(en.Data)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUndecodableCommandsAreRefusedAndNeverLogged pins finding 2 (poison
// records, live path). Effects.Send of a command the receiving machine
// cannot decode, and Effects.SetTimer of one its own machine cannot
// decode, return an error and send or set nothing; a client command whose
// encoding does not decode gets engine.ErrUndecodable from Do. None of them
// reaches the log, and replaying the whole log (snapshots removed) drops
// nothing and rebuilds the same state, refusals included.
//
// Old code: Send and SetTimer could not refuse, so the poison message was
// logged by its receiver, and Do logged a client command it had applied
// without decoding it; the next engine.Open met the record in replay,
// failed to decode it and failed, on every start.
func TestUndecodableCommandsAreRefusedAndNeverLogged(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	e := openBoth(t, dir, withMetrics(reg))
	src := keyOn(e, 0, "sender")
	to := keyOn(e, 1, "receiver")

	for _, c := range []engine.Command{&pSendPoison{To: to}, &pTimerPoison{ID: "poison"}} {
		for _, r := range pickyDo(t, e, src, c).([]string) {
			if !strings.HasPrefix(r, "refused: ") || !strings.Contains(r, "decode") {
				t.Fatalf("%T: Send/SetTimer returned %q, want a refusal saying the command does not decode", c, r)
			}
		}
	}
	for _, wl := range []uint8{9, 7} {
		_, err := e.Do(context.Background(), e.PartitionOf(src), wl, &pPoison{})
		if !errors.Is(err, engine.ErrUndecodable) {
			t.Fatalf("Do of an undecodable command to workload %d = %v, want ErrUndecodable", wl, err)
		}
	}
	// Controls, submitted after the refusals: a timer and messages that do
	// decode arrive. Messages from one partition to another arrive in
	// order, so a poison message, had it been sent, would have reached its
	// machine (and been dropped) before these.
	pickyDo(t, e, src, &pTimerNote{ID: "fine", Key: src, AtNs: time.Now().Add(20 * time.Millisecond).UnixNano()})
	pickyDo(t, e, src, &pFanout{To: to, N: 3})
	pickyWait(t, e, to, 3)
	pickyWait(t, e, src, 1)
	if d := counterValue(t, reg, "surge_engine_dropped_inputs_total"); d != 0 {
		t.Fatalf("%v inputs dropped: a refused message or timer was delivered anyway", d)
	}
	if v, _ := e.Query(context.Background(), e.PartitionOf(src), 9, pRefused{}); v.(int64) != 3 {
		t.Fatalf("%d refusals recorded, want 3", v)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	var timers, notes int
	for _, r := range logRecords(t, dir) {
		d := r.Data
		var payload []byte
		switch engine.InputKind(d[1]) {
		case engine.FromClient:
			payload = d[11:]
		case engine.FromMessage:
			payload = d[23:]
			notes++
		case engine.FromTimer:
			n := int(binary.LittleEndian.Uint16(d[11:]))
			if id := string(d[13 : 13+n]); id != "fine" {
				t.Fatalf("the log holds a firing of timer %q", id)
			}
			timers++
		}
		if len(payload) > 0 && payload[0] == poisonTag {
			t.Fatalf("the log holds an undecodable command (kind %d, partition %d)", d[1], r.Partition)
		}
	}
	if timers != 1 || notes != 3 {
		t.Fatalf("the log holds %d timer firings and %d messages, want 1 and 3", timers, notes)
	}

	// Replay all of it: without snapshots, every record is applied again.
	if err := os.RemoveAll(filepath.Join(dir, "snap")); err != nil {
		t.Fatal(err)
	}
	reg = prometheus.NewRegistry()
	e = openBoth(t, dir, withMetrics(reg))
	defer e.Close()
	if d := counterValue(t, reg, "surge_engine_dropped_inputs_total"); d != 0 {
		t.Fatalf("replay dropped %v records", d)
	}
	if _, n := pickyGet(t, e, to); n != 3 {
		t.Fatalf("after replay %q has %d notes, want 3", to, n)
	}
	if _, n := pickyGet(t, e, src); n != 1 {
		t.Fatalf("after replay %q has %d notes, want 1", src, n)
	}
	if v, _ := e.Query(context.Background(), e.PartitionOf(src), 9, pRefused{}); v.(int64) != 3 {
		t.Fatalf("after replay %d refusals, want 3: replay must refuse exactly what the live path refused", v)
	}
}

// TestPoisonRecordsInTheLogAreDroppedOnReplay pins finding 2 (poison
// records, replay). Records that are in the log although they cannot be
// applied (a message or client command whose payload does not decode, and
// envelopes that are short or of an unknown kind or version 0) are written
// straight into the log after a clean shutdown. engine.Open must succeed,
// drop exactly those records (counted by the dropped-inputs metric), apply
// the valid record that follows them, and keep every other state intact.
//
// Old code: replay returned the decode error, so engine.Open failed on
// every start: one poison record stopped the node for good.
func TestPoisonRecordsInTheLogAreDroppedOnReplay(t *testing.T) {
	dir := t.TempDir()
	e := openBoth(t, dir, nil)
	// Only self-transfers and client notes: no partition sends a message
	// to another, so the messages injected below are new to their
	// receivers and get decoded (not dropped as duplicates).
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				mustDo(t, e, e.PartitionOf(k), &transfer{From: k, To: k, N: 2})
			}
		}()
	}
	wg.Wait()
	pickyDo(t, e, "k", &pNote{Key: "k", V: 10})
	d1, c1, n1 := settle(t, e)
	if d1 != c1 || n1 != 40*int64(len(keys)) {
		t.Fatalf("before: debits %d credits %d transfers %d", d1, c1, n1)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	lg := openWAL(t, dir, 4)
	kp := uint32(engine.PartitionOfHash(engine.Hash("k"), 4))
	note, _ := (&pNote{Key: "k", V: 5}).AppendBinary(nil)
	poison := []cmdlog.Entry{
		{Partition: 0, Data: envelope(engine.FromMessage, 9, msgFields(1, 1), []byte{poisonTag})},
		{Partition: 1, Data: envelope(engine.FromMessage, 7, msgFields(2, 1), []byte{poisonTag, 1, 2})},
		{Partition: 2, Data: envelope(engine.FromClient, 9, nil, []byte{poisonTag})},
		{Partition: 3, Data: envelope(engine.FromClient, 7, nil, nil)}, // bank: "empty"
		{Partition: 0, Data: []byte{1}}, // short envelope
		{Partition: 1, Data: append([]byte{0}, envelope(engine.FromClient, 9, nil, note)[1:]...)}, // envelope version 0
		{Partition: 2, Data: envelope(engine.FromMessage, 9, []byte{1, 2, 3}, nil)},               // message fields cut short
		{Partition: 3, Data: envelope(0x42, 9, nil, note)},                                        // unknown kind
	}
	valid := cmdlog.Entry{Partition: kp, Data: envelope(engine.FromClient, 9, nil, note)}
	done := make(chan error, 1)
	lg.Append(append(poison, valid), func(_, _ cmdlog.Position, err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	e, err := tryOpenBoth(t, dir, withMetrics(reg))
	if err != nil {
		t.Fatalf("engine.Open with poison records in the log: %v", err)
	}
	if d := counterValue(t, reg, "surge_engine_dropped_inputs_total"); d != float64(len(poison)) {
		t.Fatalf("replay dropped %v records, want the %d poison ones", d, len(poison))
	}
	if d, c, n := settle(t, e); d != d1 || c != c1 || n != n1 {
		t.Fatalf("after replay: debits %d->%d credits %d->%d transfers %d->%d", d1, d, c1, c, n1, n)
	}
	if sum, n := pickyGet(t, e, "k"); sum != 15 || n != 2 {
		t.Fatalf("note after the poison records: k has sum %d from %d notes, want 15 from 2", sum, n)
	}
	// The engine works on, and the next start is clean.
	mustDo(t, e, e.PartitionOf("a"), &transfer{From: "a", To: "b", N: 1})
	settle(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openBoth(t, dir, nil)
	defer e.Close()
	if d, c, n := settle(t, e); d != d1+1 || c != c1+1 || n != n1+1 {
		t.Fatalf("after a clean restart: debits %d credits %d transfers %d", d, c, n)
	}
}

// snapFiles returns the snapshot files of partition p in dir.
func snapFiles(t testing.TB, dir string, p int) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "snap", fmt.Sprintf("snap-%05d-*.snap", p)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSnapshotThatDoesNotCoverReleasedRecordsIsRefused pins finding 3
// (missing snapshot). The review's case: many acknowledged transfers on one
// partition, then enough traffic elsewhere, with small segments and a small
// SnapshotEvery, that the first segment is released; a clean Close. With
// the snapshots intact the engine opens with all state. Without the
// partition's snapshot files, or with only an old snapshot of it, its
// released records exist nowhere: engine.Open must fail with a
// *MissingRecordsError naming the partition, whose text says to restore
// from a backup and does not advise deleting anything.
//
// Old code: Open replayed what the log still held and started, the
// partition silently missing every released transfer.
func TestSnapshotThatDoesNotCoverReleasedRecordsIsRefused(t *testing.T) {
	dir := t.TempDir()
	smallLog := func(o *engine.Options) {
		o.SnapshotEvery = 40
		lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), SegmentBytes: 2048, Partitions: o.Partitions})
		if err != nil {
			t.Fatal(err)
		}
		o.Log = lg
	}
	e := openBoth(t, dir, smallLog)
	victim := e.PartitionOf("a")
	other := keyOn(e, (victim+1)%4, "busy")
	for range 150 {
		mustDo(t, e, victim, &transfer{From: "a", To: "a", N: 1})
	}
	waitSnapshot := time.Now().Add(10 * time.Second)
	for len(snapFiles(t, dir, victim)) == 0 && time.Now().Before(waitSnapshot) {
		time.Sleep(2 * time.Millisecond)
	}
	old := snapFiles(t, dir, victim)
	if len(old) == 0 {
		t.Fatal("no snapshot of the victim partition after 150 transfers")
	}
	oldName := old[len(old)-1]
	oldData, err := os.ReadFile(oldName)
	if err != nil {
		t.Fatal(err)
	}
	for range 150 {
		mustDo(t, e, victim, &transfer{From: "a", To: "a", N: 1})
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				mustDo(t, e, e.PartitionOf(other), &transfer{From: other, To: other, N: 1})
			}
		}()
	}
	wg.Wait()
	settle(t, e)
	first := filepath.Join(dir, "wal", "00000000000000000000.wal")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		_, err := os.Stat(first)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first segment was not released while running: %v", err)
		}
	}
	victimAcct := func(e *engine.Engine) account {
		v, err := e.Query(context.Background(), victim, 7, getAccount{Key: "a"})
		if err != nil {
			t.Fatal(err)
		}
		return v.(account)
	}
	want := victimAcct(e)
	if want.transfers != 300 {
		t.Fatalf("victim has %d transfers, want 300", want.transfers)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	lg := openWAL(t, dir, 4)
	start, released := lg.Start()
	lg.Close()
	if released[victim] == 0 {
		t.Fatalf("none of the victim's records were released (log starts at %d, released %v)", start, released)
	}

	// Snapshots intact: everything is there.
	e = openBoth(t, dir, smallLog)
	if got := victimAcct(e); got != want {
		t.Fatalf("with snapshots: victim account %+v, want %+v", got, want)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	saved := map[string][]byte{}
	for _, f := range snapFiles(t, dir, victim) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		saved[f] = b
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	check := func(name string, wantSnapshot bool) {
		t.Helper()
		e, err := tryOpenBoth(t, dir, smallLog)
		if err == nil {
			got := victimAcct(e)
			e.Close()
			t.Fatalf("%s: engine.Open succeeded, the victim having %d of its 300 transfers", name, got.transfers)
		}
		var me *engine.MissingRecordsError
		if !errors.As(err, &me) {
			t.Fatalf("%s: engine.Open = %v, want *MissingRecordsError", name, err)
		}
		if me.Partition != victim || me.Released != released[victim] || me.Snapshot != wantSnapshot || me.Covered >= me.Released {
			t.Fatalf("%s: %+v, want partition %d, %d released, snapshot %v", name, me, victim, released[victim], wantSnapshot)
		}
		msg := err.Error()
		low := strings.ToLower(msg)
		if !strings.Contains(msg, fmt.Sprintf("partition %d", victim)) || !strings.Contains(low, "restore") || !strings.Contains(low, "backup") {
			t.Fatalf("%s: message must name partition %d and say to restore from a backup: %q", name, victim, msg)
		}
		for _, w := range []string{"remove", "delete"} {
			if strings.Contains(low, w) {
				t.Fatalf("%s: message advises %q: %q", name, w, msg)
			}
		}
	}
	check("no snapshot", false)
	if err := os.WriteFile(oldName, oldData, 0o644); err != nil {
		t.Fatal(err)
	}
	check("old snapshot", true)
	if err := os.Remove(oldName); err != nil {
		t.Fatal(err)
	}

	// Restored from the "backup": it opens again, with all state.
	for f, b := range saved {
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e = openBoth(t, dir, smallLog)
	defer e.Close()
	if got := victimAcct(e); got != want {
		t.Fatalf("after restoring the snapshots: victim account %+v, want %+v", got, want)
	}
}

// batchHistogram returns the sample count of surge_engine_batch_commands
// and its cumulative count per upper bound.
func batchHistogram(t testing.TB, reg *prometheus.Registry) (uint64, map[float64]uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "surge_engine_batch_commands" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		cum := map[float64]uint64{}
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] = b.GetCumulativeCount()
		}
		return h.GetSampleCount(), cum
	}
	t.Fatal("no surge_engine_batch_commands metric")
	return 0, nil
}

// TestMailboxDrainedInBatchesOfAtMostMaxBatch pins finding 5. With
// MaxBatch 8, every other partition sends 150 messages to one key in a
// single Apply, so its mailbox receives hundreds of messages at once. No
// batch may apply more than MaxBatch inputs (the batch-size histogram has
// no observation above 8), and every message still arrives exactly once,
// also across a restart.
//
// Old code: the processor took the whole mailbox into one batch, however
// large: one batch of hundreds of inputs, one huge log append and a
// partition deaf to its clients meanwhile.
func TestMailboxDrainedInBatchesOfAtMostMaxBatch(t *testing.T) {
	const maxBatch, perSender = 8, 150
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	e := openBoth(t, dir, func(o *engine.Options) {
		o.MaxBatch = maxBatch
		o.Metrics = engine.NewMetrics(reg)
	})
	target := "inbox"
	tp := e.PartitionOf(target)
	var wg sync.WaitGroup
	senders := 0
	for p := range e.Partitions() {
		if p == tp {
			continue
		}
		senders++
		wg.Add(1)
		go func() {
			defer wg.Done()
			pickyDo(t, e, keyOn(e, p, "sender"), &pFanout{To: target, N: perSender})
		}()
	}
	wg.Wait()
	want := int64(senders * perSender)
	pickyWait(t, e, target, want)
	time.Sleep(20 * time.Millisecond) // a duplicate would arrive now
	if sum, n := pickyGet(t, e, target); sum != want || n != want {
		t.Fatalf("target got %d notes summing to %d, want %d", n, sum, want)
	}

	count, cum := batchHistogram(t, reg)
	if count == 0 {
		t.Fatal("no batch observed")
	}
	if cum[maxBatch] != count {
		t.Fatalf("%d of %d batches applied more than MaxBatch=%d inputs", count-cum[maxBatch], count, maxBatch)
	}
	if cum[maxBatch]-cum[maxBatch/2] == 0 {
		t.Fatal("no batch applied more than 4 inputs: the mailbox never held a backlog, so the bound was not exercised")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openBoth(t, dir, nil)
	defer e.Close()
	time.Sleep(20 * time.Millisecond) // re-sent outboxes would arrive now
	if sum, n := pickyGet(t, e, target); sum != want || n != want {
		t.Fatalf("after restart target has %d notes summing to %d, want %d", n, sum, want)
	}
}

// TestPanickingApplyIsDroppedLiveAndOnReplay: a workload bug that panics
// on one input must neither kill the process (as it did: the processor
// goroutine's panic was fatal) nor keep the node from starting again when
// replay meets the same input. The bank workload panics on a credit that
// does not come as a message.
func TestPanickingApplyIsDroppedLiveAndOnReplay(t *testing.T) {
	dir := t.TempDir()
	e := openEngine(t, dir, 1000)
	p := e.PartitionOf("a")
	if _, err := e.Do(context.Background(), p, 7, &credit{To: "a", N: 5}); !errors.Is(err, engine.ErrApplyPanicked) {
		t.Fatalf("Do of a panicking command: %v, want ErrApplyPanicked", err)
	}
	mustDo(t, e, p, &transfer{From: "a", To: "b", N: 3})
	settle(t, e)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Replay from the log alone, without the snapshot Close wrote.
	os.RemoveAll(filepath.Join(dir, "snap"))
	e = openEngine(t, dir, 1000)
	defer e.Close()
	if d, c, n := settle(t, e); d != 3 || c != 3 || n != 1 {
		t.Fatalf("after replay: debits %d credits %d transfers %d, want 3 3 1", d, c, n)
	}
}
