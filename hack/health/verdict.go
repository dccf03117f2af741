// Package health computes the health verdict of a Kubernetes object the way
// three tools do it: kstatus (sigs.k8s.io/cli-utils, here Flux's fork), an
// Argo CD health.lua script, and Flux's healthCheckExprs (CEL). Tests can use
// it to check that the three agree on objects the operator really wrote.
//
// Objects are plain map[string]any (the content of an unstructured object).
// Numbers may be float64 (encoding/json, sigs.k8s.io/yaml) or integers: each
// judge first normalises them the way the API machinery decodes JSON, so that
// kstatus' int64 field lookups work.
package health

import (
	"encoding/json"
	"fmt"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Health is a judge's verdict in a vocabulary common to the three judges.
type Health string

// The verdicts: done, not yet (working, waiting, being deleted), failed.
const (
	Healthy     Health = "Healthy"
	Progressing Health = "Progressing"
	Degraded    Health = "Degraded"
	// Unknown means no comparable verdict: the judge failed, or said
	// something with no counterpart in the other judges (e.g. Argo's Missing).
	Unknown Health = "Unknown"
)

// Names of the judges, as found in Verdict.Judge.
const (
	JudgeKstatus = "kstatus"
	JudgeArgoCD  = "argocd"
	JudgeFlux    = "flux"
)

// Verdict is one judge's opinion of one object.
type Verdict struct {
	Judge   string // JudgeKstatus, JudgeArgoCD or JudgeFlux
	Raw     string // the judge's own status word, e.g. "Current" or "Healthy"
	Message string // the judge's message; Flux gives none
	Health  Health // Raw in the common vocabulary
}

func (v Verdict) String() string {
	s := fmt.Sprintf("%-8s %-12s %-12s", v.Judge, v.Raw, v.Health)
	if v.Message != "" {
		s += " " + v.Message
	}
	return strings.TrimRight(s, " ")
}

// fromKstatus maps a kstatus status word (also what Flux reports) to Health.
func fromKstatus(raw string) Health {
	switch raw {
	case "Current":
		return Healthy
	case "InProgress", "Terminating":
		return Progressing
	case "Failed":
		return Degraded
	}
	return Unknown // Unknown, NotFound
}

// fromArgo maps an Argo CD health status to Health. Suspended and Missing
// have no kstatus counterpart, so they are Unknown here.
func fromArgo(raw string) Health {
	switch Health(raw) {
	case Healthy, Progressing, Degraded:
		return Health(raw)
	}
	return Unknown
}

// Verdicts holds the three judges' verdicts on one object.
type Verdicts struct {
	Kstatus, ArgoCD, Flux Verdict
}

// All returns the three verdicts in a fixed order.
func (vs Verdicts) All() []Verdict {
	return []Verdict{vs.Kstatus, vs.ArgoCD, vs.Flux}
}

// Agree reports whether the three judges reached the same verdict. Unknown
// is no verdict, so three Unknowns do not agree.
func (vs Verdicts) Agree() bool {
	h := vs.Kstatus.Health
	return h != Unknown && vs.ArgoCD.Health == h && vs.Flux.Health == h
}

func (vs Verdicts) String() string {
	var b strings.Builder
	for _, v := range vs.All() {
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// normalise returns a deep copy of obj with numbers as the API machinery
// decodes them from JSON (whole numbers int64, others float64), i.e. what
// the three tools see when they read the object from a cluster.
func normalise(obj map[string]any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return out, nil
}
