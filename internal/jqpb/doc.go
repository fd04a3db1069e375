// Package jqpb holds the Go code protoc generates from proto/jq: the jq job
// queue's wire contract (messages here, connect handlers and clients in
// jqpbconnect). Do not edit the *.pb.go files: change the .proto files and
// run `make proto`. descriptor_test.go checks the generated descriptors
// against the contract in docs/API.md.
package jqpb
