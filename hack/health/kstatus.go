package health

import (
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Kstatus computes obj's status with kstatus' status.Compute, from Flux's
// fork of cli-utils: the code Flux's kustomize-controller runs when no
// healthCheckExprs match. Raw is kstatus' own word (Current, InProgress,
// Failed, Terminating, Unknown, NotFound).
func Kstatus(obj map[string]any) (Verdict, error) {
	v := Verdict{Judge: JudgeKstatus}
	obj, err := normalise(obj)
	if err != nil {
		return v, err
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return v, err
	}
	v.Raw, v.Message, v.Health = res.Status.String(), res.Message, fromKstatus(res.Status.String())
	return v, nil
}
