// Command protogen compiles the gateway's protobuf API (api/proto) and runs the
// official Go code generators on it: protoc-gen-go and protoc-gen-go-grpc, built at
// pinned versions into bin/ by `make proto`. It stands in for protoc, which the
// Go module proxy does not serve, with protocompile (buf's compiler); the
// generators see the same request protoc would send them.
//
//	go run ./hack/protogen -I api/proto -plugin bin/protoc-gen-go -plugin bin/protoc-gen-go-grpc memory/v1/memory.proto
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

type plugins []string

func (p *plugins) String() string     { return strings.Join(*p, ",") }
func (p *plugins) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	importPath := flag.String("I", "api/proto", "directory the .proto files' names are relative to")
	out := flag.String("out", "", "output directory (default: the -I directory)")
	var gens plugins
	flag.Var(&gens, "plugin", "a protoc plugin binary (repeatable)")
	flag.Parse()
	if len(gens) == 0 || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: protogen -I DIR -plugin BIN [-plugin BIN] FILE.proto...")
		os.Exit(2)
	}
	if *out == "" {
		*out = *importPath
	}
	if err := run(*importPath, *out, gens, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "protogen:", err)
		os.Exit(1)
	}
}

func run(importPath, out string, gens, files []string) error {
	req, err := Request(importPath, files)
	if err != nil {
		return err
	}
	for _, gen := range gens {
		if err := generate(gen, req, out); err != nil {
			return err
		}
	}
	return nil
}

// Request compiles files (names relative to importPath) into the request a protoc
// plugin reads: the files and everything they import, dependencies first, with
// source info (the generated code carries the .proto's comments).
func Request(importPath string, files []string) (*pluginpb.CodeGeneratorRequest, error) {
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{importPath}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := c.Compile(context.Background(), files...)
	if err != nil {
		return nil, err
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files, Parameter: proto.String("paths=source_relative"),
		CompilerVersion: &pluginpb.Version{Major: proto.Int32(0), Minor: proto.Int32(14), Patch: proto.Int32(1), Suffix: proto.String("protocompile")}}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range compiled {
		add(f)
	}
	return req, nil
}

// generate runs one plugin and writes the files it answers with.
func generate(plugin string, req *pluginpb.CodeGeneratorRequest, out string) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(plugin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", plugin, err, stderr.String())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("%s: reading its response: %w", plugin, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s: %s", plugin, resp.GetError())
	}
	for _, f := range resp.File {
		path := filepath.Join(out, f.GetName())
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
