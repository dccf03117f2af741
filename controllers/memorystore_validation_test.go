package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// validStore is a minimal store that the API server accepts; it is never provisioned
// (its Secret does not exist), the tests only look at admission.
func validStore(namespace, name string) *memoryv1alpha1.MemoryStore {
	return &memoryv1alpha1.MemoryStore{
		ObjectMeta: objectMeta(namespace, name),
		Spec: memoryv1alpha1.MemoryStoreSpec{
			Tenant: "acme",
			Backend: memoryv1alpha1.StoreBackend{Postgres: &memoryv1alpha1.PostgresSpec{
				Host: "db.example", AdminSecret: memoryv1alpha1.CredentialsSecretRef{Name: "absent"},
			}},
			Vector: memoryv1alpha1.VectorSpec{Dimension: 384},
		},
	}
}

func TestMemoryStoreAdmissionRejectsInvalidSpecs(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.MemoryStore)
		want   string
	}{
		{"uppercase tenant", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Tenant = "Acme" }, "spec.tenant"},
		{"tenant with SQL", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Tenant = "a\";drop schema x;--" }, "spec.tenant"},
		{"tenant too long", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Tenant = "a234567890123456789012345678901234567890x" }, "spec.tenant"},
		{"dimension too small", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 1 }, "spec.vector.dimension"},
		{"dimension too large", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Dimension = 40000 }, "spec.vector.dimension"},
		{"unknown metric", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Metric = "HAMMING" }, "spec.vector.metric"},
		{"two backends", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Backend.ClusterBackend = "shared" }, "set exactly one of clusterBackend or postgres"},
		{"no backend", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Backend.Postgres = nil }, "set exactly one of clusterBackend or postgres"},
		{"cluster backend plus milvus", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Backend.Postgres = nil
			s.Spec.Backend.ClusterBackend = "shared"
			s.Spec.Backend.Milvus = &memoryv1alpha1.MilvusSpec{Address: "milvus:19530"}
		}, "milvus and objectStorage come from the ClusterMemoryBackend"},
		{"openai without endpoint", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Embedder.Type = memoryv1alpha1.EmbedderOpenAI }, "an OpenAI embedder needs endpoint and model"},
		{"reclaim policy", func(s *memoryv1alpha1.MemoryStore) { s.Spec.ReclaimPolicy = "Shred" }, "spec.reclaimPolicy"},
		{"bad bucket", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.Backend.ObjectStorage = &memoryv1alpha1.ObjectStorageSpec{Endpoint: "minio:9000", Bucket: "Bad_Bucket",
				CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "s3"}}
		}, "spec.backend.objectStorage.bucket"},
		{"snapshot schedule in prose", func(s *memoryv1alpha1.MemoryStore) {
			s.Spec.SnapshotSchedule = &memoryv1alpha1.SnapshotSchedule{Schedule: "every day at 3",
				Template: memoryv1alpha1.SnapshotParameters{Encryption: memoryv1alpha1.SnapshotEncryption{Unencrypted: true}}}
		}, "schedule must be five cron fields"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validStore(ns, "invalid-"+string(rune('a'+i)))
			tc.mutate(s)
			err := k8sClient.Create(context.Background(), s)
			g := NewWithT(t)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

func TestMemoryStoreAdmissionKeepsImmutableFields(t *testing.T) {
	ns := newNamespace(t)
	store := validStore(ns, "fixed")
	create(t, store)
	key := client.ObjectKeyFromObject(store)

	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.MemoryStore)
		want   string
	}{
		{"tenant", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Tenant = "other" }, "tenant is immutable"},
		{"metric", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Vector.Metric = "L2" }, "vector.metric is immutable"},
		{"backend", func(s *memoryv1alpha1.MemoryStore) { s.Spec.Backend.Postgres.Host = "elsewhere" }, "backend is immutable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			// The controller updates the store concurrently (finalizer, status): retry
			// on conflicts until the API server judges the change itself.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				s := &memoryv1alpha1.MemoryStore{}
				if err := k8sClient.Get(context.Background(), key, s); err != nil {
					return err
				}
				tc.mutate(s)
				return k8sClient.Update(context.Background(), s)
			})
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	// Mutable fields still change; a new dimension is an embedding switch.
	NewWithT(t).Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &memoryv1alpha1.MemoryStore{}
		if err := k8sClient.Get(context.Background(), key, s); err != nil {
			return err
		}
		s.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
		s.Spec.Vector.Dimension = 768
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
}
