package controllers

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// Pure tests of the snapshot Job builder and destination planning: no API server.

const testUID = "1f0e4c9a-7b1d-4c2e-9a51-0d6f3c2b1a00"

func builderSnapshot(mutate func(*memoryv1alpha1.MemorySnapshot)) *memoryv1alpha1.MemorySnapshot {
	s := &memoryv1alpha1.MemorySnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "nightly", UID: testUID},
		Spec: memoryv1alpha1.MemorySnapshotSpec{
			StoreRef: corev1.LocalObjectReference{Name: "support-bot"},
			SnapshotParameters: memoryv1alpha1.SnapshotParameters{
				Encryption: memoryv1alpha1.SnapshotEncryption{KeySecret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "snap-key"}, Key: "key"}},
				CompressionLevel: 1,
				Job:              memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To[int64](3600)},
			},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

// builderStore is a Ready store as its status describes it; objects is its inline
// object storage (nil: none).
func builderStore(engine string, objects *memoryv1alpha1.ObjectStorageSpec) *memoryv1alpha1.MemoryStore {
	s := &memoryv1alpha1.MemoryStore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "support-bot"},
		Spec: memoryv1alpha1.MemoryStoreSpec{
			Tenant: "acme",
			Backend: memoryv1alpha1.StoreBackend{
				Postgres: &memoryv1alpha1.PostgresSpec{Host: "pg", AdminSecret: memoryv1alpha1.CredentialsSecretRef{Name: "pg-admin"}},
			},
			Vector: memoryv1alpha1.VectorSpec{Dimension: 384},
		},
		Status: memoryv1alpha1.MemoryStoreStatus{
			Postgres:         &memoryv1alpha1.PostgresStatus{Database: "postgres", Schema: "mem_acme", Role: "mem_acme_agent"},
			Vector:           &memoryv1alpha1.VectorStatus{Engine: engine, Collection: "mem_acme", Dimension: 384, Metric: "COSINE", EmbeddingModel: "all-MiniLM-L6-v2"},
			ConnectionSecret: "support-bot-memory",
			WorkerSecret:     "support-bot-memory-worker",
			Embedder: &memoryv1alpha1.EmbedderStatus{Model: "all-MiniLM-L6-v2", Roles: memoryv1alpha1.ResolvedRoles{Convention: memoryv1alpha1.RolesNone},
				DedupThreshold: "0.9712", CalibratedFor: "test"},
		},
	}
	if objects != nil {
		s.Spec.Backend.ObjectStorage = objects
		s.Status.ObjectStorage = &memoryv1alpha1.ObjectStorageStatus{Endpoint: objects.Endpoint, Bucket: objects.Bucket, Prefix: "memory-operator/acme/"}
	}
	return s
}

func inlineObjects() *memoryv1alpha1.ObjectStorageSpec {
	return &memoryv1alpha1.ObjectStorageSpec{
		Endpoint: "minio.storage:9000", Bucket: "memory", Insecure: true, Region: "eu-1", Prefix: "memory-operator",
		CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "s3-creds", AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"},
	}
}

func TestSnapshotJobBuilder(t *testing.T) {
	resources := &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	tolerations := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule}}

	cases := []struct {
		name       string
		snap       *memoryv1alpha1.MemorySnapshot
		store      *memoryv1alpha1.MemoryStore
		milvus     string
		wantConfig worker.SnapshotConfig
		wantEnv    map[string][2]string // variable -> Secret, key
		wantJob    func(g Gomega, job *batchv1.Job)
	}{
		{
			name:   "inline store, defaults",
			snap:   builderSnapshot(nil),
			store:  builderStore("Postgres", inlineObjects()),
			milvus: "milvus:19530", // ignored: the store keeps its vectors in PostgreSQL
			wantConfig: worker.SnapshotConfig{
				StoreNamespace: "team-a", StoreName: "support-bot", Tenant: "acme", SnapshotName: "nightly",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Destination: worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory",
					Prefix: "memory-operator/acme/snapshots/nightly-1f0e4c9a/"},
				Types:            []string{"episodic", "semantic", "procedural"},
				CompressionLevel: 1,
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:   {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey:   {"s3-creds", "accessKeyID"},
				worker.EnvS3SecretKey:   {"s3-creds", "secretAccessKey"},
				worker.EnvEncryptionKey: {"snap-key", "key"},
			},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(job.Name).To(Equal("nightly-1f0e4c9a"))
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(3600)))
				pod := job.Spec.Template.Spec
				g.Expect(pod.Containers[0].Resources).To(Equal(corev1.ResourceRequirements{}))
				g.Expect(pod.Tolerations).To(BeNil())
				g.Expect(pod.NodeSelector).To(BeNil())
			},
		},
		{
			name: "sessions in Redis, included",
			snap: builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) { s.Spec.IncludeSessions = true }),
			store: func() *memoryv1alpha1.MemoryStore {
				st := builderStore("Postgres", inlineObjects())
				st.Status.ShortTerm = &memoryv1alpha1.ShortTermStatus{Store: memoryv1alpha1.ShortTermRedis, RedisAddress: "redis.cache:6379", RedisUser: "mem_acme"}
				return st
			}(),
			wantConfig: worker.SnapshotConfig{
				StoreNamespace: "team-a", StoreName: "support-bot", Tenant: "acme", SnapshotName: "nightly",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Destination: worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory",
					Prefix: "memory-operator/acme/snapshots/nightly-1f0e4c9a/"},
				Types:            []string{"episodic", "semantic", "procedural"},
				CompressionLevel: 1,
				IncludeSessions:  true,
				Sessions:         worker.SessionsConfig{RedisAddress: "redis.cache:6379", RedisUser: "mem_acme", RedisTenant: "acme"},
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:   {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey:   {"s3-creds", "accessKeyID"},
				worker.EnvS3SecretKey:   {"s3-creds", "secretAccessKey"},
				worker.EnvEncryptionKey: {"snap-key", "key"},
				worker.EnvRedisPassword: {"support-bot-memory", "redisPassword"},
			},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(job.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--include-sessions", "--redis-address=redis.cache:6379"))
			},
		},
		{
			name: "milvus store, off-site destination, every option",
			snap: builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) {
				p := &s.Spec.SnapshotParameters
				p.Selection = memoryv1alpha1.SnapshotSelection{
					Scopes: []string{"user:1024", "agent:*"}, Types: []memoryv1alpha1.MemoryType{"working", "semantic"},
					ActiveWithin: &metav1.Duration{Duration: 72 * time.Hour},
				}
				p.Destination = &memoryv1alpha1.SnapshotDestination{
					Endpoint: "s3.eu-west-1.amazonaws.com", Bucket: "offsite", Prefix: "dr/agents/", Region: "eu-west-1",
					CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "aws", AccessKeyIDKey: "id", SecretAccessKeyKey: "secret"},
				}
				p.Encryption = memoryv1alpha1.SnapshotEncryption{Unencrypted: true}
				p.CompressionLevel = 19
				p.IncludeEmbeddings = true
				p.Job = memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To[int64](600), Resources: resources,
					Tolerations: tolerations, NodeSelector: map[string]string{"pool": "batch"}}
			}),
			store:  builderStore("Milvus", inlineObjects()),
			milvus: "milvus:19530",
			wantConfig: worker.SnapshotConfig{
				StoreNamespace: "team-a", StoreName: "support-bot", Tenant: "acme", SnapshotName: "nightly",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Milvus", MilvusAddress: "milvus:19530", Collection: "mem_acme"},
				EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				// Another endpoint: TLS and region are not inherited from the store's MinIO.
				Destination: worker.Destination{Endpoint: "s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "offsite",
					Prefix: "dr/agents/nightly-1f0e4c9a/"},
				Scopes: []string{"user:1024", "agent:*"}, Types: []string{"working", "semantic"}, ActiveWithin: 72 * time.Hour,
				IncludeEmbeddings: true, CompressionLevel: 19, Unencrypted: true,
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI: {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey: {"aws", "id"},
				worker.EnvS3SecretKey: {"aws", "secret"},
			},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(600)))
				pod := job.Spec.Template.Spec
				g.Expect(pod.Containers[0].Resources).To(Equal(*resources))
				g.Expect(pod.Tolerations).To(Equal(tolerations))
				g.Expect(pod.NodeSelector).To(Equal(map[string]string{"pool": "batch"}))
			},
		},
		{
			name: "store without object storage, destination with everything",
			snap: builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) {
				s.Spec.Destination = &memoryv1alpha1.SnapshotDestination{Endpoint: "minio:9000", Bucket: "snaps", Insecure: ptr.To(true),
					CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "minio"}}
				s.Spec.Job = memoryv1alpha1.JobOptions{} // no deadline given: the CRD default applies
				s.Spec.CompressionLevel = 0
			}),
			store: builderStore("Postgres", nil),
			wantConfig: worker.SnapshotConfig{
				StoreNamespace: "team-a", StoreName: "support-bot", Tenant: "acme", SnapshotName: "nightly",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Destination: worker.Destination{Endpoint: "minio:9000", Insecure: true, Bucket: "snaps",
					Prefix: "memory-operator/acme/snapshots/nightly-1f0e4c9a/"},
				Types:            []string{"episodic", "semantic", "procedural"},
				CompressionLevel: 1,
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:   {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey:   {"minio", "accessKeyID"},
				worker.EnvS3SecretKey:   {"minio", "secretAccessKey"},
				worker.EnvEncryptionKey: {"snap-key", "key"},
			},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(3600)))
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			plan, err := planDestination(tc.snap, tc.store, tc.store.Spec.Backend.ObjectStorage)
			g.Expect(err).NotTo(HaveOccurred())
			job := buildSnapshotJob(tc.snap, tc.store, snapshotJobInputs{Image: "registry.example/memory-operator:v1.2.3", Plan: plan, MilvusAddress: tc.milvus})

			// Identity and ownership.
			g.Expect(job.Namespace).To(Equal("team-a"))
			g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{
				APIVersion: "memory.amemory.io/v1alpha1", Kind: "MemorySnapshot", Name: "nightly", UID: testUID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}))
			g.Expect(job.Labels).To(Equal(map[string]string{
				"app.kubernetes.io/name": "memory-operator", "app.kubernetes.io/component": "snapshot",
				"app.kubernetes.io/managed-by": "memory-operator",
				"memory.amemory.io/snapshot":   "nightly", "memory.amemory.io/store": "support-bot",
			}))
			g.Expect(job.Spec.Template.Labels).To(Equal(job.Labels))
			g.Expect(ManagedJobSelector().Matches(labels.Set(job.Labels))).To(BeTrue())
			g.Expect(*job.Spec.BackoffLimit).To(Equal(int32(1)))
			g.Expect(*job.Spec.PodReplacementPolicy).To(Equal(batchv1.Failed))

			// The command, parsed back with the worker's own parser.
			pod := job.Spec.Template.Spec
			g.Expect(pod.Containers).To(HaveLen(1))
			c := pod.Containers[0]
			g.Expect(c.Image).To(Equal("registry.example/memory-operator:v1.2.3"))
			g.Expect(c.Command).To(Equal([]string{"/memory-operator"}))
			g.Expect(c.Args[0]).To(Equal("snapshot"))
			cfg, err := worker.ParseSnapshotArgs(c.Args[1:], io.Discard)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg).To(Equal(tc.wantConfig))

			// Secrets only by reference: no literal values anywhere in the pod.
			gotEnv := map[string][2]string{}
			for _, e := range c.Env {
				g.Expect(e.Value).To(BeEmpty(), "env %s has a literal value", e.Name)
				g.Expect(e.ValueFrom).NotTo(BeNil())
				g.Expect(e.ValueFrom.SecretKeyRef).NotTo(BeNil(), "env %s is not from a Secret", e.Name)
				gotEnv[e.Name] = [2]string{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key}
			}
			g.Expect(gotEnv).To(Equal(tc.wantEnv))
			g.Expect(c.EnvFrom).To(BeEmpty())
			for _, a := range c.Args {
				g.Expect(strings.ToLower(a)).NotTo(Or(ContainSubstring("password"), ContainSubstring("secret"), ContainSubstring("key=")), "argument %q", a)
			}

			// Least privilege.
			g.Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
			g.Expect(pod.RestartPolicy).To(Equal(corev1.RestartPolicyNever))
			g.Expect(pod.SecurityContext).To(Equal(&corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}))
			g.Expect(c.SecurityContext).To(Equal(&corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), RunAsNonRoot: ptr.To(true),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			}))
			g.Expect(c.VolumeMounts).To(Equal([]corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}))
			tc.wantJob(g, job)
		})
	}
}

func TestSnapshotJobNameFitsALabel(t *testing.T) {
	g := NewWithT(t)
	long := builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) {
		s.Name = strings.Repeat("a", 50) + ".b-" + strings.Repeat("c", 60)
	})
	name := workerJobName(long)
	g.Expect(name).To(Equal(strings.Repeat("a", 50) + ".b-c-1f0e4c9a"))
	g.Expect(name).To(HaveLen(63))
	g.Expect(validation.IsDNS1123Subdomain(name)).To(BeEmpty())
	g.Expect(validation.IsValidLabelValue(name)).To(BeEmpty())

	// A name cut right after a '.' or '-' does not end in one.
	cut := builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) { s.Name = strings.Repeat("x", 53) + "-.yyyyyyyyyy" })
	g.Expect(workerJobName(cut)).To(Equal(strings.Repeat("x", 53) + "-1f0e4c9a"))

	job := buildSnapshotJob(long, builderStore("Postgres", inlineObjects()), snapshotJobInputs{Image: "img"})
	g.Expect(job.Labels).NotTo(HaveKey(memoryv1alpha1.LabelSnapshot), "a name too long for a label is left out")
}

func TestPlanDestination(t *testing.T) {
	clusterStore := builderStore("Postgres", nil)
	clusterStore.Spec.Backend = memoryv1alpha1.StoreBackend{ClusterBackend: "shared"}
	clusterStore.Status.ObjectStorage = &memoryv1alpha1.ObjectStorageStatus{Endpoint: "minio.platform:9000", Bucket: "shared", Prefix: "memory-operator/acme/"}
	clusterObjects := &memoryv1alpha1.ObjectStorageSpec{Endpoint: "minio.platform:9000", Bucket: "shared", Insecure: true,
		CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "platform-s3"}}

	cases := []struct {
		name       string
		dest       *memoryv1alpha1.SnapshotDestination
		store      *memoryv1alpha1.MemoryStore
		objects    *memoryv1alpha1.ObjectStorageSpec
		want       destinationPlan
		wantReason string
		wantMsg    string
	}{
		{
			name:  "cluster backend with the tenant's own credentials",
			dest:  &memoryv1alpha1.SnapshotDestination{CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "tenant-s3"}},
			store: clusterStore, objects: clusterObjects,
			want: destinationPlan{
				Destination: worker.Destination{Endpoint: "minio.platform:9000", Insecure: true, Bucket: "shared",
					Prefix: "memory-operator/acme/snapshots/nightly-1f0e4c9a/"},
				Credentials: memoryv1alpha1.ObjectStorageCredentials{Name: "tenant-s3", AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"},
			},
		},
		{
			name: "cluster backend without credentials", store: clusterStore, objects: clusterObjects,
			wantReason: memoryv1alpha1.ReasonObjectStorageMissing,
			wantMsg: "MemoryStore support-bot uses ClusterMemoryBackend shared, whose object-storage credentials never leave the operator's namespace; " +
				"set spec.destination.credentialsSecret to a Secret in namespace team-a",
		},
		{
			name: "no object storage anywhere", store: builderStore("Postgres", nil),
			wantReason: memoryv1alpha1.ReasonObjectStorageMissing,
			wantMsg:    "MemoryStore support-bot has no object storage; set spec.destination.endpoint, bucket and credentialsSecret",
		},
		{
			name: "another endpoint needs its own credentials", store: builderStore("Postgres", inlineObjects()), objects: inlineObjects(),
			dest:       &memoryv1alpha1.SnapshotDestination{Endpoint: "backup.example:443"},
			wantReason: memoryv1alpha1.ReasonObjectStorageMissing,
			wantMsg:    "spec.destination.endpoint backup.example:443 is not MemoryStore support-bot's object storage; set spec.destination.credentialsSecret",
		},
		{
			name: "same endpoint, other bucket, insecure overridden", store: builderStore("Postgres", inlineObjects()), objects: inlineObjects(),
			dest: &memoryv1alpha1.SnapshotDestination{Bucket: "archive", Prefix: "keep", Insecure: ptr.To(false)},
			want: destinationPlan{
				Destination: worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Bucket: "archive", Prefix: "keep/nightly-1f0e4c9a/"},
				Credentials: memoryv1alpha1.ObjectStorageCredentials{Name: "s3-creds", AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			snap := builderSnapshot(func(s *memoryv1alpha1.MemorySnapshot) { s.Spec.Destination = tc.dest })
			got, err := planDestination(snap, tc.store, tc.objects)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				return
			}
			var se *stepError
			g.Expect(errors.As(err, &se)).To(BeTrue(), "want a stepError, got %v", err)
			g.Expect(se.reason).To(Equal(tc.wantReason))
			g.Expect(se.message).To(Equal(tc.wantMsg))
		})
	}
}
