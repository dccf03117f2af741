package controllers

import (
	"os"
	"strings"
	"testing"
)

// TestChartRBACMatchesMarkers: the chart's ClusterRole grants exactly what the
// +kubebuilder:rbac markers generate into config/rbac/role.yaml. Drift between the two
// is a classic operator bug (a permission that works in envtest, which runs as admin,
// and fails once installed); `make manifests` keeps them equal.
func TestChartRBACMatchesMarkers(t *testing.T) {
	rules := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, "\nrules:\n")
		if i < 0 {
			t.Fatalf("%s has no rules", path)
		}
		return strings.TrimSuffix(strings.TrimSpace(s[i:]), "{{- end }}")
	}
	generated, chart := rules("../config/rbac/role.yaml"), rules("../charts/memory-operator/templates/clusterrole.yaml")
	if strings.TrimSpace(generated) != strings.TrimSpace(chart) {
		t.Fatalf("the chart's ClusterRole differs from config/rbac/role.yaml: run `make manifests`\n--- generated\n%s\n--- chart\n%s", generated, chart)
	}
}
