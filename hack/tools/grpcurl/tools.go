//go:build tools

// Package tools pins grpcurl, the generic gRPC client the gateway's tests call every
// method of memory.v1.MemoryService with, through reflection.
package tools

import _ "github.com/fullstorydev/grpcurl/cmd/grpcurl"
