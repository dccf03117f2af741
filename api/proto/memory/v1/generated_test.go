package memoryv1_test

import (
	"context"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"

	memoryv1 "github.com/amemory/memory-operator/api/proto/memory/v1"
)

// TestGeneratedCodeIsCurrent compiles memory.proto and compares it with the
// descriptor the checked-in Go code carries: an edit of the .proto without `make
// proto` fails here.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{"../.."}})}
	files, err := c.Compile(context.Background(), "memory/v1/memory.proto")
	if err != nil {
		t.Fatal(err)
	}
	want := protodesc.ToFileDescriptorProto(files[0])
	got := protodesc.ToFileDescriptorProto(memoryv1.File_memory_v1_memory_proto)
	want.SourceCodeInfo, got.SourceCodeInfo = nil, nil
	if !proto.Equal(want, got) {
		t.Fatal("api/proto/memory/v1: the generated Go code is not memory.proto's: run `make proto`")
	}
}
