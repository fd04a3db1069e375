package api

import "github.com/surge-run/surge/internal/cmdlog"

// EnvelopeReserve is room left in a log entry for what the engine puts
// around a command: an 11-byte header, 23 bytes for a command one
// partition sends another (internal/engine/codec.go). Generous, so that
// a new envelope field does not make a legal request too large.
const EnvelopeReserve = 256

// MaxCommandBytes is the largest encoded command a request may make:
// every route's and call's limits are chosen so that its command stays
// under it (each workload's tests prove it for the worst case), because
// a command the log cannot hold is refused only after the request was
// accepted.
const MaxCommandBytes = cmdlog.MaxEntryBytes - EnvelopeReserve
