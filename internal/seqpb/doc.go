// Package seqpb is the generated Go code of Surge's sequencer service
// (proto/surge/sequencer/v1), committed so that building and testing need
// no protoc; `make proto` regenerates it.
package seqpb
