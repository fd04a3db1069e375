package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Remote requests.
//
//	[0] version (1)   [1] kind   [2:6] partition   [6] workload
//	kindBatch:   forwarded commands and queries (forward.go), each a
//	             kindCommand (its AppendBinary) or a kindQuery (gob of
//	             wireValue{query})
//	kindMail:    count u32, then per mail: ack u8, src u32, seq u64,
//	             prev u64, workload u8, len u32, data; then, if any mail
//	             is traced, a trailer (tracewire.go) that a node of an
//	             earlier build ignores
//
// Answers: [0] status; statusOK then what the kind answers; statusErr
// then an error code byte and the message.
const (
	remoteVersion = 1
	kindCommand   = 1 // in a batch only
	kindQuery     = 2 // in a batch only
	kindMail      = 3
	kindNotes     = 4 // gob of []remoteNote
	kindBatch     = 5 // count u32, then per request kind u8, workload u8, len u32, payload (forward.go)
	remoteHeader  = 7

	statusOK  = 0
	statusErr = 1
)

// Error codes on the wire, so that the caller's errors.Is sees the same
// sentinel the owner returned.
// New codes are appended: a node reads an unknown one as a malformed
// answer.
var remoteErrs = []error{nil, ErrNotOwner, ErrOverloaded, ErrClosed, ErrFailed, ErrUndecodable, ErrApplyPanicked, context.Canceled, context.DeadlineExceeded, ErrOutcomeUnknown, ErrTooLarge}

// codeOutcomeUnknown is what any other error is sent as.
const codeOutcomeUnknown = 9

type remoteError struct {
	sentinel error
	msg      string
	wait     time.Duration // an overload's predicted wait
}

// RetryAfter is a relayed overload's predicted wait (see RetryAfter).
func (r *remoteError) RetryAfter() time.Duration { return r.wait }

func (r *remoteError) Error() string { return r.msg }

func (r *remoteError) Unwrap() error { return r.sentinel }

// rawCommand is a command forwarded by another node: already encoded.
type rawCommand []byte

func (c rawCommand) AppendBinary(dst []byte) ([]byte, error) { return append(dst, c...), nil }

func remoteHead(kind byte, part int, wl uint8) []byte {
	b := make([]byte, remoteHeader, 64)
	b[0], b[1] = remoteVersion, kind
	binary.LittleEndian.PutUint32(b[2:], uint32(part))
	b[6] = wl
	return b
}

// mailChunk is how many of ms, at least one, go in one call: at most
// maxCallMail, in at most MaxRemoteBytes (every message is bounded by
// Effects.Send, far below it).
func mailChunk(ms []mail) int {
	size := remoteHeader + 4
	for i := range ms {
		size += mailWireBytes + len(ms[i].data)
		if ms[i].tc != nil {
			size += traceTrailerBytes
		}
		if i >= maxCallMail || i > 0 && size > MaxRemoteBytes {
			return i
		}
	}
	return len(ms)
}

// mailWireBytes is the fixed part of one mail in a kindMail request.
const mailWireBytes = 1 + 4 + 8 + 8 + 1 + 4

func encodeMailRequest(target int, ms []mail) []byte {
	b := remoteHead(kindMail, target, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(ms)))
	for _, m := range ms {
		ack := byte(0)
		if m.ack {
			ack = 1
		}
		b = append(b, ack)
		b = binary.LittleEndian.AppendUint32(b, m.src)
		b = binary.LittleEndian.AppendUint64(b, m.seq)
		b = binary.LittleEndian.AppendUint64(b, m.prev)
		b = append(b, m.workload)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m.data)))
		b = append(b, m.data...)
	}
	return appendMailTraces(b, ms)
}

func answerErr(err error) []byte {
	return append([]byte{statusErr, errCode(err)}, err.Error()...)
}

// errCode is err's index in remoteErrs; anything else is sent as
// ErrOutcomeUnknown.
func errCode(err error) byte {
	for i, s := range remoteErrs {
		if s != nil && errors.Is(err, s) {
			return byte(i)
		}
	}
	return codeOutcomeUnknown
}

// decodeErrAnswer reads a statusErr answer.
func decodeErrAnswer(b []byte) error {
	if len(b) < 2 || b[0] != statusErr || int(b[1]) >= len(remoteErrs) || b[1] == 0 {
		return fmt.Errorf("%w: malformed error answer", ErrOutcomeUnknown)
	}
	return remoteErr(b[1], string(b[2:]))
}

// remoteErr is the error a node answered: its sentinel and message, and
// for an overload the wait its message predicts (see overloaded.Error),
// so a relayed refusal still tells the client when to come back.
func remoteErr(code byte, msg string) error {
	e := &remoteError{sentinel: remoteErrs[code], msg: msg}
	if e.sentinel != ErrOverloaded {
		return e
	}
	if i := strings.LastIndex(msg, waitMark); i >= 0 && strings.HasSuffix(msg, ")") {
		if d, err := time.ParseDuration(msg[i+len(waitMark) : len(msg)-1]); err == nil && d > 0 {
			e.wait = d
		}
	}
	return e
}

// HandleRemote answers a request another node's engine forwarded here
// (through its Transport). It never panics on malformed input: it answers
// with an error.
func (e *Engine) HandleRemote(ctx context.Context, body []byte) []byte {
	if !e.clusterMode() {
		return answerErr(errors.New("engine: this node is not in cluster mode"))
	}
	if len(body) < remoteHeader || body[0] != remoteVersion {
		return answerErr(errors.New("engine: malformed forwarded request"))
	}
	kind, part := body[1], int(binary.LittleEndian.Uint32(body[2:]))
	if part >= len(e.parts) {
		return answerErr(fmt.Errorf("engine: forwarded request for partition %d of %d", part, len(e.parts)))
	}
	payload := body[remoteHeader:]
	switch kind {
	case kindBatch:
		return e.handleBatch(ctx, part, payload)
	case kindMail:
		if err := e.receiveMail(part, payload); err != nil {
			return answerErr(err)
		}
		return []byte{statusOK}
	case kindNotes:
		v, err := decodeValue(payload)
		notes, ok := v.([]remoteNote)
		if err != nil || !ok {
			return answerErr(fmt.Errorf("engine: malformed forwarded notes: %v", err))
		}
		if fn := e.opts.Notify; fn != nil {
			for _, n := range notes {
				if n.Part >= 0 && n.Part < len(e.parts) {
					fn(n.Part, n.Workload, n.V)
				}
			}
		}
		return []byte{statusOK}
	}
	return answerErr(fmt.Errorf("engine: forwarded request of unknown kind %d", kind))
}

func (e *Engine) receiveMail(part int, b []byte) error {
	if len(b) < 4 {
		return errors.New("engine: malformed forwarded mail")
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	t := e.parts[part]
	ms := make([]mail, 0, min(n, 4096))
	for range n {
		if len(b) < 26 {
			return errors.New("engine: malformed forwarded mail")
		}
		m := mail{ack: b[0] == 1, src: binary.LittleEndian.Uint32(b[1:]), seq: binary.LittleEndian.Uint64(b[5:]),
			prev: binary.LittleEndian.Uint64(b[13:]), workload: b[21]}
		l := int(binary.LittleEndian.Uint32(b[22:]))
		b = b[26:]
		if l > len(b) {
			return errors.New("engine: malformed forwarded mail")
		}
		m.data = bytes.Clone(b[:l])
		b = b[l:]
		if int(m.src) >= len(e.parts) {
			return fmt.Errorf("engine: forwarded mail from partition %d of %d", m.src, len(e.parts))
		}
		ms = append(ms, m)
	}
	if err := readMailTraces(b, ms); err != nil {
		return err
	}
	if !t.serving.Load() {
		// Not here (any more): the senders send it again to the owner.
		return ErrNotOwner
	}
	for _, m := range ms {
		t.mail.push(m)
	}
	return nil
}
