package controllers

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// gitOpsMarks are the labels and annotations GitOps tools put on what they apply. A
// snapshot carrying one is the tool's to delete: deleting it ourselves (its TTL) would
// only make the tool create it again, and a new snapshot be taken.
var gitOpsMarks = []struct {
	annotation bool
	key, tool  string
}{
	{true, "argocd.argoproj.io/tracking-id", "Argo CD"},
	{false, "argocd.argoproj.io/instance", "Argo CD"},
	// Argo CD's default label tracking before 3.0; Helm charts set it too, and a
	// snapshot kept by mistake costs storage, one deleted by mistake loses data.
	{false, "app.kubernetes.io/instance", "Argo CD or Helm"},
	{false, "kustomize.toolkit.fluxcd.io/name", "Flux"},
	{false, "helm.toolkit.fluxcd.io/name", "Flux"},
}

// gitOpsManager describes the GitOps tool that manages obj ("Flux (label
// kustomize.toolkit.fluxcd.io/name)"), or "" when none does.
func gitOpsManager(obj metav1.Object) string {
	for _, m := range gitOpsMarks {
		marks, kind := obj.GetLabels(), "label"
		if m.annotation {
			marks, kind = obj.GetAnnotations(), "annotation"
		}
		if _, ok := marks[m.key]; ok {
			return m.tool + " (" + kind + " " + m.key + ")"
		}
	}
	return ""
}
