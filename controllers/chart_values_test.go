package controllers

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

// TestChartValuesMatchTheirSchema: the chart's default values pass its
// values.schema.json, as helm checks them on every install and upgrade (a value added
// to values.yaml but not to the schema breaks both).
func TestChartValuesMatchTheirSchema(t *testing.T) {
	dir := filepath.Join("..", "charts", "memory-operator")
	raw, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("values.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(values)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(v); err != nil {
		t.Fatalf("values.yaml does not pass values.schema.json: %v", err)
	}
}
