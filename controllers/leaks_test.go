package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// leakMarker replaces every secret found in the text searched: finding it means a leak.
const leakMarker = "\x00LEAKED-SECRET\x00"

// leakableSecretValues are the values that must never appear outside Secrets: every
// password, access key, encryption key and API key the tests and the operator put in
// Secrets (the gateway keys Secret holds API keys under their names), and the
// backends' own credentials.
func leakableSecretValues(ctx context.Context, c client.Client) (map[string]string, error) {
	var list corev1.SecretList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	values := map[string]string{}
	add := func(where, v string) {
		if len(v) >= 8 { // shorter values are no secrets worth the name, and match by chance
			values[v] = where
		}
	}
	for _, s := range list.Items {
		for k, v := range s.Data {
			lk := strings.ToLower(k)
			if strings.HasSuffix(s.Name, "-gateway-keys") || strings.Contains(lk, "password") || strings.Contains(lk, "secret") ||
				strings.Contains(lk, "key") || strings.Contains(lk, "token") {
				add(fmt.Sprintf("Secret %s/%s key %s", s.Namespace, s.Name, k), string(v))
			}
		}
	}
	for _, env := range []string{"MEMORY_TEST_PG_PASSWORD", "MEMORY_TEST_S3_SECRET_KEY", "MEMORY_TEST_S3_ACCESS_KEY"} {
		add("$"+env, os.Getenv(env))
	}
	return values, nil
}

// exposedTexts are what the operator shows outside Secrets: its log, every Event, the
// status of every memory resource, Pods' termination messages, and the specs of the
// Jobs and Deployments it made (which must reference Secrets, never copy them).
func exposedTexts(ctx context.Context, c client.Client, logPath string) (map[string]string, error) {
	texts := map[string]string{}
	logs, err := os.ReadFile(logPath)
	if err != nil {
		return nil, err
	}
	texts["the controllers' log"] = string(logs)
	add := func(what string, v any) error {
		b, err := json.Marshal(v)
		texts[what] = string(b)
		return err
	}
	var events corev1.EventList
	var pods corev1.PodList
	var jobs batchv1.JobList
	var deps appsv1.DeploymentList
	var stores memoryv1alpha1.MemoryStoreList
	var snaps memoryv1alpha1.MemorySnapshotList
	var restores memoryv1alpha1.MemoryRestoreList
	var backends memoryv1alpha1.ClusterMemoryBackendList
	for _, l := range []client.ObjectList{&events, &pods, &jobs, &deps, &stores, &snaps, &restores, &backends} {
		if err := c.List(ctx, l); err != nil {
			return nil, err
		}
	}
	var messages []string
	for _, e := range events.Items {
		messages = append(messages, e.Reason+": "+e.Message)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil {
				messages = append(messages, cs.State.Terminated.Message)
			}
		}
	}
	var statuses []any
	for _, s := range stores.Items {
		statuses = append(statuses, s.Status)
	}
	for _, s := range snaps.Items {
		statuses = append(statuses, s.Status)
	}
	for _, r := range restores.Items {
		statuses = append(statuses, r.Status)
	}
	for _, b := range backends.Items {
		statuses = append(statuses, b.Status)
	}
	var specs []any
	for _, j := range jobs.Items {
		specs = append(specs, j.Spec)
	}
	for _, d := range deps.Items {
		specs = append(specs, d.Spec)
	}
	for what, v := range map[string]any{"Events and termination messages": messages, "status": statuses, "Job and Deployment specs": specs} {
		if err := add(what, v); err != nil {
			return nil, err
		}
	}
	return texts, nil
}

// checkNoSecretLeaks searches every exposed text for every secret value at once (a
// strings.Replacer is a trie over all of them).
func checkNoSecretLeaks(ctx context.Context, c client.Client, logPath string) error {
	secrets, err := leakableSecretValues(ctx, c)
	if err != nil {
		return fmt.Errorf("leak check: %w", err)
	}
	texts, err := exposedTexts(ctx, c, logPath)
	if err != nil {
		return fmt.Errorf("leak check: %w", err)
	}
	pairs := make([]string, 0, 2*len(secrets))
	for v := range secrets {
		pairs = append(pairs, v, leakMarker)
	}
	r := strings.NewReplacer(pairs...)
	var leaks []string
	for what, text := range texts {
		if !strings.Contains(r.Replace(text), leakMarker) {
			continue
		}
		for v, where := range secrets { // name the secret and show where, never its value
			if i := strings.Index(text, v); i >= 0 {
				context := text[max(0, i-120):i] + "<the secret>" + text[i+len(v):min(len(text), i+len(v)+60)]
				leaks = append(leaks, fmt.Sprintf("%s appears in %s: …%s…", where, what, context))
			}
		}
	}
	sort.Strings(leaks)
	if len(leaks) > 0 {
		return fmt.Errorf("secrets leaked:\n  %s", strings.Join(leaks, "\n  "))
	}
	fmt.Fprintf(os.Stderr, "leak check: none of %d secret values in %d bytes of logs, Events, status, termination messages and specs\n",
		len(secrets), len(texts["the controllers' log"]))
	return nil
}
