package health

import (
	"context"
	"fmt"
	"os"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/runtime/cel"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// LoadFluxChecks reads a YAML list shaped like a Flux Kustomization's
// spec.healthCheckExprs (e.g. config/health/flux-health-checks.yaml).
// Unknown fields are an error, so a misspelt key cannot silently drop a check.
func LoadFluxChecks(path string) ([]kustomize.CustomHealthCheck, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var checks []kustomize.CustomHealthCheck
	if err := yaml.UnmarshalStrict(data, &checks); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return checks, nil
}

// Flux evaluates obj with Flux's own CEL evaluator (fluxcd/pkg/runtime/cel),
// using the check for obj's group and kind, or else the one for its whole
// group (an entry without kind), as Flux picks them. Raw is a kstatus word;
// Flux's evaluator gives no message. An expression that cannot be evaluated
// (e.g. a missing top-level field) is an error: Flux would wait until its
// timeout.
func Flux(checks []kustomize.CustomHealthCheck, obj map[string]any) (Verdict, error) {
	v := Verdict{Judge: JudgeFlux}
	obj, err := normalise(obj)
	if err != nil {
		return v, err
	}
	u := &unstructured.Unstructured{Object: obj}
	check, err := fluxCheckFor(checks, u.GroupVersionKind().GroupKind())
	if err != nil {
		return v, err
	}
	evaluator, err := cel.NewStatusEvaluator(&check.HealthCheckExpressions)
	if err != nil {
		return v, fmt.Errorf("flux check for %s: %w", check.Kind, err)
	}
	res, err := evaluator.Evaluate(context.Background(), u)
	if err != nil {
		return v, err
	}
	v.Raw, v.Message, v.Health = res.Status.String(), res.Message, fromKstatus(res.Status.String())
	return v, nil
}

func fluxCheckFor(checks []kustomize.CustomHealthCheck, gk schema.GroupKind) (kustomize.CustomHealthCheck, error) {
	var groupWide *kustomize.CustomHealthCheck
	for i, c := range checks {
		cgk := schema.FromAPIVersionAndKind(c.APIVersion, c.Kind).GroupKind()
		switch {
		case cgk == gk:
			return c, nil
		case c.Kind == "" && cgk.Group == gk.Group:
			groupWide = &checks[i]
		}
	}
	if groupWide != nil {
		return *groupWide, nil
	}
	return kustomize.CustomHealthCheck{}, fmt.Errorf("no Flux health check for %s", gk)
}
