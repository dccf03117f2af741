package health

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// FluxChecksFile is the Flux file's name inside a health directory.
const FluxChecksFile = "flux-health-checks.yaml"

// ScriptPath is where Argo CD's layout (resource_customizations) keeps the
// health script of a group and kind: <healthDir>/<group>/<Kind>/health.lua.
func ScriptPath(healthDir, group, kind string) string {
	return filepath.Join(healthDir, group, kind, "health.lua")
}

// Judge runs the three judges on obj, with the Lua script and Flux checks
// for obj's kind found in healthDir (normally config/health). A judge that
// fails gets Raw "error", its error as Message and Health Unknown; the
// returned error joins all the judges' errors.
func Judge(healthDir string, obj map[string]any) (Verdicts, error) {
	gk := (&unstructured.Unstructured{Object: obj}).GroupVersionKind().GroupKind()
	var errs []error
	record := func(judge string, v Verdict, err error) Verdict {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", judge, err))
			return Verdict{Judge: judge, Raw: "error", Message: err.Error(), Health: Unknown}
		}
		return v
	}

	var vs Verdicts
	v, err := Kstatus(obj)
	vs.Kstatus = record(JudgeKstatus, v, err)

	script, err := os.ReadFile(ScriptPath(healthDir, gk.Group, gk.Kind))
	if err == nil {
		v, err = Lua(string(script), obj)
	}
	vs.ArgoCD = record(JudgeArgoCD, v, err)

	checks, err := LoadFluxChecks(filepath.Join(healthDir, FluxChecksFile))
	if err == nil {
		v, err = Flux(checks, obj)
	}
	vs.Flux = record(JudgeFlux, v, err)

	return vs, errors.Join(errs...)
}

// ReadObjects reads the objects in a YAML or JSON file: every document of a
// multi-document file, and the items of a List (as kubectl get -o yaml
// prints several objects). Empty documents are skipped.
func ReadObjects(path string) ([]map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	var objs []map[string]any
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if obj == nil {
			continue // a document holding only comments
		}
		kind, _ := obj["kind"].(string)
		items, isList := obj["items"].([]any)
		if !isList || !strings.HasSuffix(kind, "List") {
			objs = append(objs, obj)
			continue
		}
		for i, item := range items {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: %s item %d is not an object", path, kind, i)
			}
			objs = append(objs, m)
		}
	}
}
