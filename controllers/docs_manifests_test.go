package controllers

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// yamlBlock is a fenced YAML block of a Markdown file, indented or not.
var yamlBlock = regexp.MustCompile("(?ms)^( *)```yaml\n(.*?)^ *```")

// TestDocumentedManifestsAreAccepted: the resources docs/engines.md shows and every
// sample kustomize applies are accepted by the API server as written (a dry run),
// so a user who copies them meets no schema or CEL error.
func TestDocumentedManifestsAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	var docs []string
	md, err := os.ReadFile(filepath.Join("..", "docs", "engines.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range yamlBlock.FindAllStringSubmatch(string(md), -1) {
		indent := m[1]
		var b strings.Builder
		for _, line := range strings.SplitAfter(m[2], "\n") {
			b.WriteString(strings.TrimPrefix(line, indent))
		}
		docs = append(docs, b.String())
	}
	if len(docs) < 4 {
		t.Fatalf("docs/engines.md: %d YAML blocks, want the backend, store, snapshot and restore", len(docs))
	}
	samples, err := filepath.Glob(filepath.Join("..", "config", "samples", "memory_v1alpha1_*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("samples: %v %v", samples, err)
	}
	for _, file := range samples {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	for _, doc := range docs {
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader([]byte(doc)), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("decoding:\n%s\n%v", doc, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			if obj.GetNamespace() != "" || obj.GetKind() != "ClusterMemoryBackend" {
				obj.SetNamespace(ns)
			}
			if err := k8sClient.Create(context.Background(), obj, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s %s is refused: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}
