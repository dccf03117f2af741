#!/usr/bin/env bash
# Copies the manager's RBAC rules, which controller-gen generates into
# config/rbac/role.yaml from the +kubebuilder:rbac markers, into the Helm chart's
# ClusterRole, so the two never drift (`make manifests` runs it; a test checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
chart=charts/memory-operator/templates/clusterrole.yaml
{
	sed -n '1,/^rules:/p' "$chart" | sed '$d'
	sed -n '/^rules:/,$p' config/rbac/role.yaml
	echo '{{- end }}'
} >"$chart.tmp"
mv "$chart.tmp" "$chart"
