package controllers

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Helpers of the MemoryRestore tests.

// newRestore is a restore of the snapshot into target, keyed by snapshotKeySecret.
func newRestore(namespace, name, snapshot, target string, mutate func(*memoryv1alpha1.MemoryRestore)) *memoryv1alpha1.MemoryRestore {
	r := &memoryv1alpha1.MemoryRestore{
		ObjectMeta: objectMeta(namespace, name),
		Spec: memoryv1alpha1.MemoryRestoreSpec{
			Source: memoryv1alpha1.RestoreSource{
				SnapshotRef: &corev1.LocalObjectReference{Name: snapshot},
				KeySecret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: snapshotKeySecret}, Key: "key"},
			},
			TargetRef: corev1.LocalObjectReference{Name: target},
		},
	}
	if mutate != nil {
		mutate(r)
	}
	return r
}

// fromLocation makes a restore read an unencrypted package at prefix in the test MinIO,
// with the credentials in Secret creds.
func fromLocation(f backendFixture, bucket, prefix, creds string) func(*memoryv1alpha1.MemoryRestore) {
	return func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source = memoryv1alpha1.RestoreSource{
			Location: &memoryv1alpha1.PackageLocation{Endpoint: f.s3.Endpoint, Bucket: bucket, Prefix: prefix, Insecure: true,
				CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: creds}},
			Unencrypted: true,
		}
	}
}

func getRestore(g Gomega, key client.ObjectKey) *memoryv1alpha1.MemoryRestore {
	r := &memoryv1alpha1.MemoryRestore{}
	g.Expect(k8sClient.Get(context.Background(), key, r)).To(Succeed())
	return r
}

// waitRestoreCondition waits until the restore's condition has the status and reason
// and returns the restore as it was then.
func waitRestoreCondition(t *testing.T, key client.ObjectKey, condType string, status metav1.ConditionStatus, reason string) *memoryv1alpha1.MemoryRestore {
	t.Helper()
	var r *memoryv1alpha1.MemoryRestore
	NewWithT(t).Eventually(func(g Gomega) {
		r = getRestore(g, key)
		c := meta.FindStatusCondition(r.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s not set; conditions: %+v", condType, r.Status.Conditions)
		g.Expect(c.ObservedGeneration).To(Equal(r.Generation))
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", condType, c.Message)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %s", condType, c.Message)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return r
}

// waitRestoreWaiting waits until the restore waits (Progressing False) for reason with
// exactly message, and returns it.
func waitRestoreWaiting(t *testing.T, key client.ObjectKey, reason, message string) *memoryv1alpha1.MemoryRestore {
	t.Helper()
	var r *memoryv1alpha1.MemoryRestore
	NewWithT(t).Eventually(func(g Gomega) {
		r = getRestore(g, key)
		c := restoreCondition(r, memoryv1alpha1.ConditionProgressing)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse), "Progressing: %s", c.Message)
		g.Expect(c.Reason).To(Equal(reason), "Progressing: %s", c.Message)
		g.Expect(c.Message).To(Equal(message))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return r
}

func restoreCondition(r *memoryv1alpha1.MemoryRestore, condType string) metav1.Condition {
	if c := meta.FindStatusCondition(r.Status.Conditions, condType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// restoreJobsIn lists the restore Jobs of a namespace.
func restoreJobsIn(g Gomega, namespace string) []batchv1.Job {
	var list batchv1.JobList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(namespace),
		client.MatchingLabels{"app.kubernetes.io/component": restoreContainer})).To(Succeed())
	return list.Items
}

// envSecretRefs maps the Job container's environment to the Secret and key of each.
func envSecretRefs(job *batchv1.Job) map[string][2]string {
	out := map[string][2]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if ref := e.ValueFrom.SecretKeyRef; ref != nil {
			out[e.Name] = [2]string{ref.Name, ref.Key}
		}
	}
	return out
}

// updateRestore applies mutate to the current restore and returns what the API server
// says (conflicts with the controller's status writes are retried).
func updateRestore(r *memoryv1alpha1.MemoryRestore, mutate func(*memoryv1alpha1.MemoryRestore)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(r), r); err != nil {
			return err
		}
		mutate(r)
		return k8sClient.Update(context.Background(), r)
	})
}

// restoreSample decodes a MemoryRestore from config/samples.
func restoreSample(t *testing.T, file string) *memoryv1alpha1.MemoryRestore {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sample := &memoryv1alpha1.MemoryRestore{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(sample); err != nil {
		t.Fatal(err)
	}
	return sample
}
