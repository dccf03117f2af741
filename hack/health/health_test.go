package health

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The objects here are written by hand: they test the harness and the
// scripts' logic. Objects the real controllers wrote are the fixtures under
// config/health/<group>/<Kind>/testdata (see TestArgoHealthTests).

const (
	healthDir  = "../../config/health"
	group      = "memory.amemory.io"
	apiVersion = group + "/v1alpha1"
)

var kinds = []string{"MemoryStore", "ClusterMemoryBackend", "MemorySnapshot", "MemoryRestore"}

// object builds an object of kind with metadata.generation; status nil
// leaves status out entirely.
func object(kind string, generation int64, status map[string]any) map[string]any {
	meta := map[string]any{"name": "demo", "generation": generation}
	if kind != "ClusterMemoryBackend" { // the only cluster-scoped kind
		meta["namespace"] = "default"
	}
	obj := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "spec": map[string]any{}}
	if status != nil {
		obj["status"] = status
	}
	return obj
}

// observed is a status the operator wrote after observing generation.
func observed(generation int64, conditions ...map[string]any) map[string]any {
	list := make([]any, len(conditions))
	for i, c := range conditions {
		c["observedGeneration"] = generation
		list[i] = c
	}
	return map[string]any{"observedGeneration": generation, "conditions": list}
}

func condition(typ, status, reason, message string) map[string]any {
	return map[string]any{
		"type": typ, "status": status, "reason": reason, "message": message,
		"lastTransitionTime": "2026-01-02T03:04:05Z",
	}
}

func script(t *testing.T, kind string) string {
	t.Helper()
	data, err := os.ReadFile(ScriptPath(healthDir, group, kind))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

type ruleCase struct {
	name string
	obj  func(kind string) map[string]any
	// Expected verdicts: Argo CD's status and message, kstatus' and Flux's
	// raw status ("error" when the judge cannot evaluate the object).
	argo, message, kstatus, flux string
	// gap marks objects the controllers never write on which kstatus or
	// Flux is known to differ; everywhere else the three must agree.
	gap bool
}

var ruleCases = []ruleCase{
	{
		name: "1 deletion blocked by finalizers",
		obj: func(k string) map[string]any {
			o := object(k, 2, observed(2, condition("Ready", "True", "Ready", "Ready")))
			meta := o["metadata"].(map[string]any)
			meta["deletionTimestamp"] = "2026-01-02T03:04:05Z"
			meta["finalizers"] = []any{"memory.amemory.io/cleanup", "example.com/keep"}
			return o
		},
		argo: "Progressing", message: "Pending deletion; blocked by finalizers: memory.amemory.io/cleanup, example.com/keep",
		kstatus: "Terminating", flux: "InProgress",
	},
	{
		name: "1 deletion without finalizers",
		obj: func(k string) map[string]any {
			o := object(k, 2, observed(2))
			o["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-02T03:04:05Z"
			return o
		},
		argo: "Progressing", message: "Pending deletion",
		kstatus: "Terminating", flux: "InProgress",
	},
	{
		name: "2 CRD default status, not yet reconciled",
		obj: func(k string) map[string]any {
			return object(k, 1, map[string]any{"observedGeneration": int64(-1)})
		},
		argo: "Progressing", message: "Waiting for the operator to observe generation 1",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		name: "2 older generation observed",
		obj: func(k string) map[string]any {
			return object(k, 3, observed(2, condition("Ready", "True", "Ready", "Ready")))
		},
		argo: "Progressing", message: "Waiting for the operator to observe generation 3",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		name: "2 no observedGeneration, Ready False",
		obj: func(k string) map[string]any {
			s := observed(1, condition("Ready", "False", "Provisioning", "Provisioning"))
			delete(s, "observedGeneration")
			return object(k, 1, s)
		},
		argo: "Progressing", message: "Waiting for the operator to observe generation 1",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		// kstatus skips the generation check without observedGeneration
		// and calls an object without conditions Current.
		name: "2 gap: no observedGeneration, no conditions",
		obj: func(k string) map[string]any {
			return object(k, 1, map[string]any{"conditions": []any{}})
		},
		argo: "Progressing", message: "Waiting for the operator to observe generation 1",
		kstatus: "Current", flux: "InProgress", gap: true,
	},
	{
		// The CRD default rules this out; Flux cannot guard a missing
		// top-level status (no such attribute), kstatus says Current.
		name: "2 gap: no status at all",
		obj:  func(k string) map[string]any { return object(k, 1, nil) },
		argo: "Progressing", message: "Waiting for the operator to observe generation 1",
		kstatus: "Current", flux: "error", gap: true,
	},
	{
		name: "3 Reconciling with a message",
		obj: func(k string) map[string]any {
			return object(k, 4, observed(4,
				condition("Ready", "False", "Provisioning", "Provisioning"),
				condition("Reconciling", "True", "Provisioning", "Creating the PostgreSQL schema")))
		},
		argo: "Progressing", message: "Creating the PostgreSQL schema",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		name: "3 Reconciling without a message",
		obj: func(k string) map[string]any {
			return object(k, 4, observed(4,
				condition("Reconciling", "True", "Provisioning", ""),
				condition("Ready", "False", "Provisioning", "")))
		},
		argo: "Progressing", message: "Provisioning",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		name: "4 Stalled",
		obj: func(k string) map[string]any {
			return object(k, 2, observed(2,
				condition("Ready", "False", "InvalidSpec", "backend missing"),
				condition("Stalled", "True", "InvalidSpec", `ClusterMemoryBackend "nope" not found`)))
		},
		argo: "Degraded", message: `InvalidSpec: ClusterMemoryBackend "nope" not found`,
		kstatus: "Failed", flux: "Failed",
	},
	{
		// Other conditions, even Degraded=True, are not looked at.
		name: "5 Ready True",
		obj: func(k string) map[string]any {
			return object(k, 1, observed(1,
				condition("Progressing", "False", "Done", "Done"),
				condition("Degraded", "True", "ReplicaDown", "one replica down"),
				condition("Ready", "True", "Ready", "Store is ready"),
				condition("Stalled", "False", "Ready", "")))
		},
		argo: "Healthy", message: "Store is ready",
		kstatus: "Current", flux: "Current",
	},
	{
		name: "6 Ready False",
		obj: func(k string) map[string]any {
			return object(k, 1, observed(1, condition("Ready", "False", "Waiting", "Waiting for PostgreSQL")))
		},
		argo: "Progressing", message: "Waiting for PostgreSQL",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		name: "6 Ready Unknown",
		obj: func(k string) map[string]any {
			return object(k, 1, observed(1, condition("Ready", "Unknown", "Checking", "Checking the backend")))
		},
		argo: "Progressing", message: "Checking the backend",
		kstatus: "InProgress", flux: "InProgress",
	},
	{
		// kstatus calls an object without any condition it knows Current.
		name: "7 gap: observed, no Ready",
		obj: func(k string) map[string]any {
			return object(k, 1, observed(1, condition("Progressing", "True", "Working", "Working")))
		},
		argo: "Progressing", message: "Waiting for the operator to report Ready",
		kstatus: "Current", flux: "InProgress", gap: true,
	},
	{
		// The controllers never set both; kstatus takes whichever comes
		// first in the list, the Lua and CEL checks take Reconciling.
		name: "3/4 gap: Stalled listed before Reconciling",
		obj: func(k string) map[string]any {
			return object(k, 1, observed(1,
				condition("Stalled", "True", "Failed", "gave up"),
				condition("Reconciling", "True", "Retrying", "retrying")))
		},
		argo: "Progressing", message: "retrying",
		kstatus: "Failed", flux: "InProgress", gap: true,
	},
}

func TestRules(t *testing.T) {
	for _, kind := range kinds {
		for _, tc := range ruleCases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				obj := tc.obj(kind)

				argo, err := Lua(script(t, kind), obj)
				if err != nil {
					t.Fatal(err)
				}
				if argo.Raw != tc.argo || argo.Message != tc.message {
					t.Errorf("argocd = %s %q, want %s %q", argo.Raw, argo.Message, tc.argo, tc.message)
				}

				vs, err := Judge(healthDir, obj)
				if vs.Kstatus.Raw != tc.kstatus {
					t.Errorf("kstatus = %s (%s), want %s", vs.Kstatus.Raw, vs.Kstatus.Message, tc.kstatus)
				}
				if vs.Flux.Raw != tc.flux {
					t.Errorf("flux = %s (%s), want %s", vs.Flux.Raw, vs.Flux.Message, tc.flux)
				}
				if vs.ArgoCD != argo {
					t.Errorf("Judge's argocd verdict %v differs from Lua's %v", vs.ArgoCD, argo)
				}
				if !tc.gap && (err != nil || !vs.Agree()) {
					t.Errorf("judges disagree (err %v):\n%s", err, vs)
				}
				if tc.gap && vs.Agree() {
					t.Errorf("known gap closed, update the case:\n%s", vs)
				}
			})
		}
	}
}

// A failed restore as the restore controller leaves it.
func TestFailedRestore(t *testing.T) {
	obj := object("MemoryRestore", 1, observed(1,
		condition("Completed", "True", "Failed", "restore failed"),
		condition("Ready", "False", "Failed", "restore failed"),
		condition("Stalled", "True", "Failed", "snapshot checksum mismatch")))
	vs, err := Judge(healthDir, obj)
	if err != nil {
		t.Fatal(err)
	}
	if vs.Kstatus.Raw != "Failed" || vs.ArgoCD.Raw != "Degraded" || vs.Flux.Raw != "Failed" || !vs.Agree() {
		t.Errorf("want kstatus Failed, argocd Degraded, flux Failed; got\n%s", vs)
	}
	if want := "Failed: snapshot checksum mismatch"; vs.ArgoCD.Message != want {
		t.Errorf("argocd message %q, want %q", vs.ArgoCD.Message, want)
	}
}

// The CRD default status {observedGeneration: -1}: not yet observed.
func TestCRDDefaultStatus(t *testing.T) {
	for _, kind := range kinds {
		vs, err := Judge(healthDir, object(kind, 1, map[string]any{"observedGeneration": int64(-1)}))
		if err != nil {
			t.Fatal(err)
		}
		if vs.Kstatus.Raw != "InProgress" || vs.ArgoCD.Raw != "Progressing" || vs.Flux.Raw != "InProgress" || !vs.Agree() {
			t.Errorf("%s: want InProgress/Progressing/InProgress, got\n%s", kind, vs)
		}
	}
}

// Objects decoded from YAML or JSON carry float64 numbers: generation must
// still render as "1" in Lua and kstatus must still read it.
func TestFloatNumbers(t *testing.T) {
	var obj map[string]any
	err := yaml.Unmarshal([]byte(`
apiVersion: memory.amemory.io/v1alpha1
kind: MemorySnapshot
metadata: {name: s, namespace: default, generation: 1}
status: {observedGeneration: -1}
`), &obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obj["metadata"].(map[string]any)["generation"].(float64); !ok {
		t.Fatal("expected sigs.k8s.io/yaml to decode numbers as float64")
	}
	vs, err := Judge(healthDir, obj)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Waiting for the operator to observe generation 1"; vs.ArgoCD.Message != want || !vs.Agree() {
		t.Errorf("want agreement and message %q, got\n%s", want, vs)
	}
}

func TestLuaHasNoStringLibrary(t *testing.T) {
	_, err := Lua(`return { status = string.format("%s", "Healthy") }`, map[string]any{})
	if err == nil {
		t.Fatal("string.format worked: the string library must not be open")
	}
}

func TestLuaSafeOs(t *testing.T) {
	v, err := Lua(`
local os2 = require("os")
if os.getenv ~= nil or os.execute ~= nil or os2.exit ~= nil then
  return { status = "Degraded", message = "unsafe os" }
end
return { status = "Healthy", message = os.date("!%Y", 0) .. " " .. tostring(os.time() > 0) }`, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Raw != "Healthy" || v.Message != "1970 true" {
		t.Errorf("got %v", v)
	}
}

func TestLuaTimeout(t *testing.T) {
	start := time.Now()
	_, err := Lua(`while true do end`, map[string]any{})
	if err == nil {
		t.Fatal("an endless loop returned without error")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("stopped after %s, want about 1s", d)
	}
}

func TestLuaInvalidStatus(t *testing.T) {
	v, err := Lua(`return { status = "Fine", message = "all good" }`, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Raw != "Unknown" || v.Health != Unknown || v.Message != invalidHealthStatus {
		t.Errorf("got %v, want Unknown %q", v, invalidHealthStatus)
	}
}

func TestLuaMustReturnTable(t *testing.T) {
	if _, err := Lua(`return "Healthy"`, map[string]any{}); err == nil {
		t.Fatal("a script returning a string was accepted")
	}
}

func TestLuaSeesObject(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"n": 3, "list": []any{"a", "b"}, "on": true, "off": nil}}
	v, err := Lua(`return { status = "Healthy", message = obj.spec.n * 2 .. #obj.spec.list .. tostring(obj.spec.on) .. tostring(obj.spec.off) }`, obj)
	if err != nil {
		t.Fatal(err)
	}
	if v.Message != "62truenil" {
		t.Errorf("message %q", v.Message)
	}
}

// The four scripts are one script: they may differ only in the kind's name,
// must not use the string library and must never return Suspended.
func TestScriptsAreAlike(t *testing.T) {
	first := strings.ReplaceAll(script(t, kinds[0]), kinds[0], "KIND")
	for _, kind := range kinds {
		s := script(t, kind)
		if strings.ReplaceAll(s, kind, "KIND") != first {
			t.Errorf("%s/health.lua differs from %s/health.lua beyond the kind's name", kind, kinds[0])
		}
		if strings.Contains(s, "string.") || strings.Contains(s, ":format") {
			t.Errorf("%s/health.lua uses the string library", kind)
		}
		if strings.Contains(s, `"Suspended"`) {
			t.Errorf("%s/health.lua returns Suspended", kind)
		}
	}
}

func TestFluxChecksFile(t *testing.T) {
	checks, err := LoadFluxChecks(filepath.Join(healthDir, FluxChecksFile))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range checks {
		if c.APIVersion != apiVersion || c.InProgress == "" || c.Failed == "" || c.Current == "" {
			t.Errorf("incomplete check %+v", c)
		}
		if seen[c.Kind] {
			t.Errorf("two checks for %s", c.Kind)
		}
		seen[c.Kind] = true
	}
	for _, kind := range kinds {
		if !seen[kind] {
			t.Errorf("no check for %s", kind)
		}
	}
	if len(checks) != len(kinds) {
		t.Errorf("%d checks, want %d", len(checks), len(kinds))
	}
}

func TestJudgeWithoutScript(t *testing.T) {
	obj := map[string]any{"apiVersion": apiVersion, "kind": "Unheard", "metadata": map[string]any{"name": "x", "generation": 1}}
	vs, err := Judge(healthDir, obj)
	if err == nil {
		t.Fatal("want an error for a kind without script or Flux check")
	}
	if vs.ArgoCD.Raw != "error" || vs.Flux.Raw != "error" || vs.Agree() {
		t.Errorf("got\n%s", vs)
	}
	if vs.Kstatus.Raw != "Current" {
		t.Errorf("kstatus should still judge: %v", vs.Kstatus)
	}
}

func TestAgreeNeedsAVerdict(t *testing.T) {
	u := Verdict{Health: Unknown}
	if (Verdicts{u, u, u}).Agree() {
		t.Error("three Unknowns agree")
	}
	h := Verdict{Health: Healthy}
	if !(Verdicts{h, h, h}).Agree() || (Verdicts{h, h, u}).Agree() {
		t.Error("Agree is wrong")
	}
}

func TestReadObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "objs.yaml")
	err := os.WriteFile(path, []byte(`# comment only
---
apiVersion: v1
kind: List
items:
- {apiVersion: memory.amemory.io/v1alpha1, kind: MemoryStore, metadata: {name: a}}
- {apiVersion: memory.amemory.io/v1alpha1, kind: MemorySnapshot, metadata: {name: b}}
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryRestore
metadata: {name: c}
---
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ReadObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o["metadata"].(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Errorf("read %v, want a,b,c", names)
	}
}

// argoTests is Argo CD's health_test.yaml format.
type argoTests struct {
	Tests []struct {
		HealthStatus struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"healthStatus"`
		InputPath string `json:"inputPath"`
	} `json:"tests"`
}

// TestArgoHealthTests runs each kind's health_test.yaml as Argo CD's own
// test would, and also requires the three judges to agree on every fixture
// and a fixture to be Degraded exactly when its name says "failed".
func TestArgoHealthTests(t *testing.T) {
	for _, kind := range kinds {
		dir := filepath.Join(healthDir, group, kind)
		data, err := os.ReadFile(filepath.Join(dir, "health_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tests argoTests
		if err := yaml.UnmarshalStrict(data, &tests); err != nil {
			t.Fatalf("%s/health_test.yaml: %v", kind, err)
		}
		// Every fixture is judged, also one not (yet) listed in health_test.yaml (a
		// held-out object dropped into testdata/): the judges must agree on it, and
		// call it Degraded exactly when its name says "failed".
		listed := map[string]bool{}
		for _, tc := range tests.Tests {
			listed[filepath.Clean(tc.InputPath)] = true
		}
		files, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			rel, _ := filepath.Rel(dir, file)
			if listed[rel] {
				continue
			}
			t.Run(kind+"/unlisted/"+rel, func(t *testing.T) {
				objs, err := ReadObjects(file)
				if err != nil {
					t.Fatal(err)
				}
				for _, obj := range objs {
					vs, err := Judge(healthDir, obj)
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%s:\n%s", rel, vs)
					if !vs.Agree() {
						t.Errorf("judges disagree:\n%s", vs)
					}
					if failed := strings.Contains(filepath.Base(file), "failed"); failed != (vs.ArgoCD.Health == Degraded) {
						t.Errorf("name says failed=%v but verdict is %s", failed, vs.ArgoCD.Health)
					}
				}
			})
		}
		for _, tc := range tests.Tests {
			t.Run(kind+"/"+tc.InputPath, func(t *testing.T) {
				objs, err := ReadObjects(filepath.Join(dir, tc.InputPath))
				if err != nil {
					t.Fatal(err)
				}
				if len(objs) != 1 {
					t.Fatalf("%d objects, want 1", len(objs))
				}
				vs, err := Judge(healthDir, objs[0])
				if err != nil {
					t.Fatal(err)
				}
				if vs.ArgoCD.Raw != tc.HealthStatus.Status || vs.ArgoCD.Message != tc.HealthStatus.Message {
					t.Errorf("argocd = %s %q, want %s %q", vs.ArgoCD.Raw, vs.ArgoCD.Message,
						tc.HealthStatus.Status, tc.HealthStatus.Message)
				}
				if !vs.Agree() {
					t.Errorf("judges disagree:\n%s", vs)
				}
				failed := strings.Contains(filepath.Base(tc.InputPath), "failed")
				if failed != (vs.ArgoCD.Health == Degraded) {
					t.Errorf("name says failed=%v but verdict is %s", failed, vs.ArgoCD.Health)
				}
			})
		}
	}
}

// TestArgoCDConfigIsCurrent: the argocd-cm patch users apply holds the scripts as they
// are here.
func TestArgoCDConfigIsCurrent(t *testing.T) {
	want, err := ArgoCDConfig(healthDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(healthDir, ArgoCDConfigFile))
	if err != nil || string(got) != string(want) {
		t.Fatalf("config/health/%s is not current (%v): run go run ./hack/health/healthcheck -argocd-cm > config/health/%s",
			ArgoCDConfigFile, err, ArgoCDConfigFile)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(got, &cm); err != nil {
		t.Fatal(err)
	}
	for _, kind := range kinds {
		script, err := os.ReadFile(ScriptPath(healthDir, group, kind))
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["resource.customizations.health."+group+"_"+kind] != string(script) {
			t.Errorf("no script for %s under its argocd-cm key", kind)
		}
	}
}
