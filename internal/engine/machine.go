package engine

import (
	"encoding"
	"errors"
	"fmt"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Command is a workload command. The engine encodes it into the log before
// its effects are released, and a workload's Machine decodes it on replay.
type Command = encoding.BinaryAppender

// InputKind says where an input came from.
type InputKind uint8

const (
	// FromClient is a command submitted through Engine.Do.
	FromClient InputKind = 1
	// FromMessage is a command another key sent with Effects.Send.
	FromMessage InputKind = 2
	// FromTimer is the command stored with Effects.SetTimer, now due.
	FromTimer InputKind = 3
)

// Input is what a Machine applies: a command plus the context the engine
// stamped on it. Time is the only clock a Machine may read.
type Input struct {
	Kind    InputKind
	TimeNs  int64 // stamped by the processor when the command was batched
	Cmd     Command
	TimerID string // FromTimer only
	// Trace is the sampled trace this input runs in (zero: none): a
	// client's, or the step of a message or timer that a traced input
	// made. Messages and timers this apply makes carry it on. It is not
	// logged: a Machine may keep it beside what it holds (for a later
	// Effects.TraceStep) but must not let it change its state otherwise.
	Trace TraceContext
}

// Machine is one workload's state in one partition. It must be a pure,
// deterministic function of the inputs it is given: no I/O, no clock, no
// randomness, no goroutines, no output that depends on map iteration order.
// The engine owns all I/O and calls a Machine from one goroutine only.
type Machine interface {
	// Apply applies in to the state and records what should happen in fx.
	// in is the partition's own, reused for its next input: a machine
	// keeps what it holds, never the pointer.
	Apply(in *Input, fx *Effects)
	// Query answers a read-only question about the state.
	Query(q any) any
	// Decode turns bytes written by a Command's AppendBinary back into it.
	Decode(data []byte) (Command, error)
	// AppendSnapshot appends an encoding of the whole state to dst. The
	// encoding must be deterministic.
	AppendSnapshot(dst []byte) []byte
	// Restore replaces the state with one encoded by AppendSnapshot.
	Restore(data []byte) error
}

// Canonical is optionally implemented by a Machine some of whose commands
// apply exactly as the copies decoded from their encodings would, which
// the partition then applies as they are, without decoding the bytes it
// logs (the jobs bench's unary submit: the decode was a sixth of the
// partition's work and four allocations). Canonical(cmd) may say so only of a
// command whose encoding decodes, whose decoded copy applies with the
// same effects and leaves the same state (the workload's tests check it,
// encoding and decoding every field), and which its caller never changes
// once it is handed to Do: the machine may keep what it points to.
type Canonical interface {
	Canonical(cmd Command) bool
}

// SnapshotForker is optionally implemented by a Machine whose state is too
// large to encode while its partition waits. ForkSnapshot runs on the
// partition's goroutine and must capture a view of the state as of now
// cheaply; the function it returns encodes exactly what AppendSnapshot
// would have returned at that moment, may run on another goroutine while
// Apply continues, and is called at most once.
type SnapshotForker interface {
	ForkSnapshot() func(dst []byte) []byte
}

// Workload creates the per-partition Machines of one kind of workload. ID
// is written into every log record, so it must never change once data
// exists.
type Workload interface {
	ID() uint8
	Name() string
	NewMachine(partition int) Machine
}

// Effects collects what one Apply wants done. The engine releases them only
// after the command is durable.
//
// It is the whole seam between a Machine and the engine, and a test can
// stand in for the engine with it: make one with new(Effects), call Apply,
// read what was asked with Replied, IsUnchanged, Sends, Timers and Notes,
// and Reset it before the next Apply. Outside the engine, Send and
// SetTimer still refuse what they refuse inside it (a nil or unencodable
// command, one over its size limit, a timer id over MaxTimerIDBytes),
// except a command the receiving machine cannot decode: only the engine
// knows its machines (package enginetest's Harness checks that too).
type Effects struct {
	reply     any
	sends     []send
	timers    []timerOp
	notes     []any
	steps     []StepTrace // declared by TraceStep (tracectx.go)
	unchanged bool
	// check decodes a command as its machine will when it is delivered or
	// fired; set by the engine (nil in workload tests that call Apply).
	check func(wl uint8, data []byte) error
}

type send struct {
	key      string
	workload uint8
	data     []byte
}

type timerOp struct {
	id     string
	atNs   int64
	data   []byte
	cancel bool
}

// Reply sets the value returned to the client that submitted the command.
func (fx *Effects) Reply(v any) { fx.reply = v }

// Unchanged declares that the command changed nothing: the engine then
// does not log it (a rejection costs no disk write), and its reply is
// released like a query's, after everything it observed is durable. It
// must be true: replay never sees the command. Ignored if the command
// also sent messages or set timers.
func (fx *Effects) Unchanged() { fx.unchanged = true }

// Send delivers cmd to the machine of workload wl that owns key, exactly
// once, after this command is durable. cmd is encoded now and decoded by
// the receiving workload at once: a message that the receiver could not
// decode is refused here (the error says why; nothing is sent) rather
// than logged, where every replay would meet it again. The check is the
// same in replay, so the outcome is too.
func (fx *Effects) Send(key string, wl uint8, cmd Command) error {
	data, err := fx.encode(wl, cmd, maxMessageBytes)
	if err != nil {
		return fmt.Errorf("engine: message to %q refused: %w", key, err)
	}
	fx.sends = append(fx.sends, send{key: key, workload: wl, data: data})
	return nil
}

// SetTimer arranges for cmd to be applied to this machine (as FromTimer
// input) at or after atNs. Setting an id again replaces the earlier timer.
// Like Send, it refuses a command its machine could not decode, one larger
// than a client command may be (MaxCommandBytes, ErrTooLarge), and an id
// longer than MaxTimerIDBytes.
func (fx *Effects) SetTimer(id string, atNs int64, cmd Command) error {
	if len(id) > MaxTimerIDBytes {
		return fmt.Errorf("engine: timer id of %d bytes refused (limit %d)", len(id), MaxTimerIDBytes)
	}
	// The workload is the one applying; check learns it from the engine.
	data, err := fx.encode(timerWorkload, cmd, MaxCommandBytes)
	if err != nil {
		return fmt.Errorf("engine: timer %q refused: %w", id, err)
	}
	fx.timers = append(fx.timers, timerOp{id: id, atNs: atNs, data: data})
	return nil
}

// MaxTimerIDBytes bounds a timer id (it is logged with every firing).
const MaxTimerIDBytes = 1<<15 - 1

// timerWorkload tells check to use the workload whose Apply is running.
const timerWorkload = 0xff

func (fx *Effects) encode(wl uint8, cmd Command, limit int) ([]byte, error) {
	if cmd == nil {
		return nil, errors.New("nil command")
	}
	data, err := cmd.AppendBinary(nil)
	if err != nil {
		return nil, fmt.Errorf("encoding: %w", err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: the command encodes to %d bytes, the limit is %d (a log entry takes at most %d bytes)",
			ErrTooLarge, len(data), limit, cmdlog.MaxEntryBytes)
	}
	if fx.check != nil {
		if err := fx.check(wl, data); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// Notify hands v to Options.Notify once this command is durable, for
// observers outside the engine (a long poll waiting for an order to end, a
// worker waiting for a job). Notes are not logged and replay does not
// produce them: an observer that needs the state must query it, and may
// miss notes from before a restart. A command that notifies is logged
// even if it declared Unchanged, since the note describes a change.
func (fx *Effects) Notify(v any) { fx.notes = append(fx.notes, v) }

// CancelTimer removes a pending timer; cancelling an unknown id is a no-op.
func (fx *Effects) CancelTimer(id string) {
	fx.timers = append(fx.timers, timerOp{id: id, cancel: true})
}

func (fx *Effects) reset() {
	fx.reply = nil
	fx.unchanged = false
	clear(fx.sends)
	fx.sends = fx.sends[:0]
	clear(fx.timers)
	fx.timers = fx.timers[:0]
	clear(fx.notes)
	fx.notes = fx.notes[:0]
	clear(fx.steps)
	fx.steps = fx.steps[:0]
}

var (
	// ErrOverloaded means the partition has more work queued than it can
	// start within Options.MaxQueueDelay (or its inbox is full): the
	// command was not applied; retry later.
	ErrOverloaded = errors.New("engine: partition overloaded")
	// ErrClosed means the engine is shutting down or has stopped.
	ErrClosed = errors.New("engine: closed")
	// ErrUndecodable means a command did not decode from the bytes it
	// encodes to, so it was refused rather than logged.
	ErrUndecodable = errors.New("engine: command refused: it does not decode from its own encoding")
	// ErrApplyPanicked means the workload panicked applying the command
	// (a bug); the command was dropped with its effects.
	ErrApplyPanicked = errors.New("engine: the workload failed to apply the command")
	// ErrTooLarge means a command (or a message or timer it made) would
	// need a log entry larger than cmdlog.MaxEntryBytes, which no log
	// takes: it was refused before it was applied, and nothing changed.
	ErrTooLarge = errors.New("engine: command refused: too large for the log")
	// ErrFailed means the log failed; the engine refuses all work because
	// its memory may be ahead of what is on disk.
	ErrFailed = errors.New("engine: the command log failed; restart the server")
)

// The read side of Effects: what one Apply asked for, as the engine acts
// on it. The engine reads its own fields; these are for a workload's tests
// (and tools) that call Apply themselves, with an Effects they made with
// new(engine.Effects) and Reset between applies. The slices they return
// are valid until the next Reset.

// Message is one Send that Effects accepted: the command already encoded.
type Message struct {
	Key      string
	Workload uint8
	Data     []byte
}

// TimerOp is one SetTimer (Data set, Cancel false) or CancelTimer that
// Effects accepted, the command already encoded.
type TimerOp struct {
	ID     string
	AtNs   int64
	Data   []byte
	Cancel bool
}

// Replied returns the value passed to Reply (nil if none).
func (fx *Effects) Replied() any { return fx.reply }

// IsUnchanged reports whether Apply called Unchanged.
func (fx *Effects) IsUnchanged() bool { return fx.unchanged }

// Unlogged reports whether the engine leaves a client command with these
// effects out of its log: it declared Unchanged and sent, timed and
// noted nothing. (Messages and timer firings are always logged.)
func (fx *Effects) Unlogged() bool {
	return fx.unchanged && len(fx.sends) == 0 && len(fx.timers) == 0 && len(fx.notes) == 0
}

// Notes returns what Apply passed to Notify, in order.
func (fx *Effects) Notes() []any { return fx.notes }

// Sends returns the messages Send accepted, in order.
func (fx *Effects) Sends() []Message {
	out := make([]Message, len(fx.sends))
	for i, s := range fx.sends {
		out[i] = Message{Key: s.key, Workload: s.workload, Data: s.data}
	}
	return out
}

// Timers returns the timers set and cancelled, in the order Apply asked:
// applied in turn, the last operation on an id decides.
func (fx *Effects) Timers() []TimerOp {
	out := make([]TimerOp, len(fx.timers))
	for i, t := range fx.timers {
		out[i] = TimerOp{ID: t.id, AtNs: t.atNs, Data: t.data, Cancel: t.cancel}
	}
	return out
}

// Reset empties fx for the next Apply, keeping its memory.
func (fx *Effects) Reset() { fx.reset() }
