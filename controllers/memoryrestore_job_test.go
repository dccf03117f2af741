package controllers

import (
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// Pure tests of the restore Job builder: no API server.

const (
	restoreUID   = "5a6b7c8d-0000-4c2e-9a51-0d6f3c2b1a00"
	manifestSHA  = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	packagePath  = "memory-operator/acme/snapshots/nightly-1f0e4c9a/"
	restoreImage = "registry.example/memory-operator:v1.2.3"
)

func builderRestore(mutate func(*memoryv1alpha1.MemoryRestore)) *memoryv1alpha1.MemoryRestore {
	r := &memoryv1alpha1.MemoryRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "migrate", UID: restoreUID},
		Spec: memoryv1alpha1.MemoryRestoreSpec{
			Source: memoryv1alpha1.RestoreSource{
				SnapshotRef: &corev1.LocalObjectReference{Name: "nightly"},
				KeySecret:   &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "snap-key"}, Key: "key"},
			},
			TargetRef: corev1.LocalObjectReference{Name: "support-bot"},
			Job:       memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To[int64](3600)},
		},
	}
	if mutate != nil {
		mutate(r)
	}
	return r
}

// snapshotSource is the source plan of builderRestore's snapshot, as resolveSource
// makes it from the snapshot's Job and status.
func snapshotSource() restoreSourcePlan {
	return restoreSourcePlan{
		Package:     worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory", Prefix: packagePath},
		Credentials: memoryv1alpha1.ObjectStorageCredentials{Name: "s3-creds", AccessKeyIDKey: "accessKeyID", SecretAccessKeyKey: "secretAccessKey"},
		Key:         &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "snap-key"}, Key: "key"},
		Snapshot:    "nightly", ManifestSHA256: manifestSHA,
	}
}

func TestRestoreJobBuilder(t *testing.T) {
	resources := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
	tolerations := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
	openAITarget := builderStore("Milvus", nil)
	openAITarget.Spec.Embedder = memoryv1alpha1.EmbedderSpec{Type: memoryv1alpha1.EmbedderOpenAI, Endpoint: "http://tei:8080", Model: "bge-small",
		MaxInputBytes: 2048, Overflow: memoryv1alpha1.OverflowRefuse,
		APIKeySecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "tei-token"}, Key: "token"}}
	openAITarget.Status.Vector.EmbeddingModel = "bge-small"

	cases := []struct {
		name        string
		restore     *memoryv1alpha1.MemoryRestore
		target      *memoryv1alpha1.MemoryStore
		source      *restoreSourcePlan // nil: planLocation of the restore
		milvus      string
		wantConfig  worker.RestoreConfig
		wantEnv     map[string][2]string // variable -> Secret, key
		wantLabels  map[string]string    // besides the common ones
		wantVolumes []corev1.Volume      // besides /tmp
		wantJob     func(g Gomega, job *batchv1.Job)
	}{
		{
			name: "snapshot source, scope map in a ConfigMap, defaults",
			restore: builderRestore(func(r *memoryv1alpha1.MemoryRestore) {
				r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{
					Scopes:   []memoryv1alpha1.ScopeRename{{From: "user:1024", To: "user:dbc0a3"}},
					Prefixes: []memoryv1alpha1.PrefixRename{{From: "user:legacy-", To: "user:"}},
					From: &memoryv1alpha1.MappingSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "id-map"}, Key: "users.csv"}},
					Unmapped: memoryv1alpha1.UnmappedSkip,
				}
			}),
			target: builderStore("Postgres", inlineObjects()),
			source: ptr.To(snapshotSource()),
			milvus: "milvus:19530", // ignored: the target keeps its vectors in PostgreSQL
			wantConfig: worker.RestoreConfig{
				RestoreNamespace: "team-a", RestoreName: "migrate", RestoreUID: restoreUID,
				Source:               worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory", Prefix: packagePath},
				ExpectManifestSHA256: manifestSHA,
				TargetNamespace:      "team-a", TargetName: "support-bot", Tenant: "acme",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Embedder: "Hashing", EmbedderMaxInputBytes: 8192, EmbedderOverflow: "Truncate",
				ScopeMap:  []worker.ScopeRule{{From: "user:1024", To: "user:dbc0a3"}},
				PrefixMap: []worker.ScopeRule{{From: "user:legacy-", To: "user:"}},
				MapFile:   "/etc/memory-operator/mapping/users.csv", MapFormat: "csv", Unmapped: "Skip",
				Types:          []string{"episodic", "semantic", "procedural"},
				ConflictPolicy: "KeepNewer", Embeddings: "Reuse",
				DetailKey: packagePath + "restores/migrate-5a6b7c8d/detail.jsonl.zst",
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:       {"support-bot-memory-worker", "uri"},
				worker.EnvSourceS3AccessKey: {"s3-creds", "accessKeyID"},
				worker.EnvSourceS3SecretKey: {"s3-creds", "secretAccessKey"},
				worker.EnvSourceKey:         {"snap-key", "key"},
			},
			wantLabels: map[string]string{"memory.amemory.io/restore": "migrate", "memory.amemory.io/store": "support-bot",
				"memory.amemory.io/snapshot": "nightly"},
			wantVolumes: []corev1.Volume{{Name: "mapping", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "id-map"}, Items: []corev1.KeyToPath{{Key: "users.csv", Path: "users.csv"}}}}}},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(job.Name).To(Equal("migrate-5a6b7c8d"))
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(3600)))
				pod := job.Spec.Template.Spec
				g.Expect(pod.Containers[0].Resources).To(Equal(corev1.ResourceRequirements{}))
				g.Expect(pod.Tolerations).To(BeNil())
				g.Expect(pod.NodeSelector).To(BeNil())
			},
		},
		{
			name: "location source, Milvus target with an OpenAI embedder, map in a Secret, every option",
			restore: builderRestore(func(r *memoryv1alpha1.MemoryRestore) {
				r.Spec.Source = memoryv1alpha1.RestoreSource{
					Location: &memoryv1alpha1.PackageLocation{Endpoint: "s3.eu-west-1.amazonaws.com", Bucket: "dr", Prefix: "agents/nightly-0a1b2c3d",
						Region: "eu-west-1", CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "aws", AccessKeyIDKey: "id", SecretAccessKeyKey: "secret"}},
					Unencrypted: true,
				}
				r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: &memoryv1alpha1.MappingSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "real-ids"}, Key: "ids"},
					Format:       memoryv1alpha1.MappingJSONLines}}
				r.Spec.Denylist = []string{"user:admin", "session:*"}
				r.Spec.Types = []memoryv1alpha1.MemoryType{"working", "semantic"}
				r.Spec.ConflictPolicy = memoryv1alpha1.ConflictOverwrite
				r.Spec.Embeddings = memoryv1alpha1.EmbeddingsReembed
				r.Spec.DryRun = true
				r.Spec.Rehydrate = true
				r.Spec.Job = memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To[int64](600), Resources: resources,
					Tolerations: tolerations, NodeSelector: map[string]string{"pool": "batch"}}
			}),
			target: openAITarget,
			milvus: "milvus:19530",
			wantConfig: worker.RestoreConfig{
				RestoreNamespace: "team-a", RestoreName: "migrate", RestoreUID: restoreUID,
				Source:          worker.Destination{Endpoint: "s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "dr", Prefix: "agents/nightly-0a1b2c3d/"},
				Unencrypted:     true,
				TargetNamespace: "team-a", TargetName: "support-bot", Tenant: "acme",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Milvus", MilvusAddress: "milvus:19530", Collection: "mem_acme"},
				EmbeddingModel: "bge-small", Dimension: 384, Metric: "COSINE", Embedder: "OpenAI", EmbedderEndpoint: "http://tei:8080",
				EmbedderMaxInputBytes: 2048, EmbedderOverflow: "Refuse",
				MapFile: "/etc/memory-operator/mapping/ids", MapFormat: "jsonl", Unmapped: "Keep",
				Denylist: []string{"user:admin", "session:*"}, Types: []string{"working", "semantic"},
				ConflictPolicy: "Overwrite", Embeddings: "Reembed", DryRun: true, Rehydrate: true,
				DetailKey: "agents/nightly-0a1b2c3d/restores/migrate-5a6b7c8d/detail.jsonl.zst",
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:       {"support-bot-memory-worker", "uri"},
				worker.EnvSourceS3AccessKey: {"aws", "id"},
				worker.EnvSourceS3SecretKey: {"aws", "secret"},
				worker.EnvEmbedderAPIKey:    {"tei-token", "token"},
			},
			wantLabels: map[string]string{"memory.amemory.io/restore": "migrate", "memory.amemory.io/store": "support-bot"},
			wantVolumes: []corev1.Volume{{Name: "mapping", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "real-ids", Items: []corev1.KeyToPath{{Key: "ids", Path: "ids"}}}}}},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(600)))
				pod := job.Spec.Template.Spec
				g.Expect(pod.Containers[0].Resources).To(Equal(*resources))
				g.Expect(pod.Tolerations).To(Equal(tolerations))
				g.Expect(pod.NodeSelector).To(Equal(map[string]string{"pool": "batch"}))
			},
		},
		{
			name: "location source with default keys, map in an object, no deadline given",
			restore: builderRestore(func(r *memoryv1alpha1.MemoryRestore) {
				r.Spec.Source = memoryv1alpha1.RestoreSource{
					Location: &memoryv1alpha1.PackageLocation{Endpoint: "minio:9000", Bucket: "snaps", Prefix: "p/", Insecure: true,
						CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "minio"}},
					KeySecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "dr-key"}, Key: "k"},
				}
				r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: &memoryv1alpha1.MappingSource{
					Object: &memoryv1alpha1.MappingObject{Bucket: "maps", Key: "acme/users.ndjson"}}}
				r.Spec.Job = memoryv1alpha1.JobOptions{}
				r.Spec.AllowRepeat = true
			}),
			target: builderStore("Postgres", nil),
			wantConfig: worker.RestoreConfig{
				RestoreNamespace: "team-a", RestoreName: "migrate", RestoreUID: restoreUID,
				Source:          worker.Destination{Endpoint: "minio:9000", Insecure: true, Bucket: "snaps", Prefix: "p/"},
				TargetNamespace: "team-a", TargetName: "support-bot", Tenant: "acme",
				Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Embedder: "Hashing", EmbedderMaxInputBytes: 8192, EmbedderOverflow: "Truncate",
				MapObject: "acme/users.ndjson", MapBucket: "maps", MapFormat: "jsonl", Unmapped: "Keep",
				Types:          []string{"episodic", "semantic", "procedural"},
				ConflictPolicy: "KeepNewer", Embeddings: "Reuse", AllowRepeat: true,
				DetailKey: "p/restores/migrate-5a6b7c8d/detail.jsonl.zst",
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:       {"support-bot-memory-worker", "uri"},
				worker.EnvSourceS3AccessKey: {"minio", "accessKeyID"},
				worker.EnvSourceS3SecretKey: {"minio", "secretAccessKey"},
				worker.EnvSourceKey:         {"dr-key", "k"},
			},
			wantLabels: map[string]string{"memory.amemory.io/restore": "migrate", "memory.amemory.io/store": "support-bot"},
			wantJob: func(g Gomega, job *batchv1.Job) {
				g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(3600)), "the CRD default")
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			source := planLocation
			if tc.source != nil {
				source = func(*memoryv1alpha1.MemoryRestore) restoreSourcePlan { return *tc.source }
			}
			job := buildRestoreJob(tc.restore, tc.target, restoreJobInputs{Image: restoreImage, Source: source(tc.restore), MilvusAddress: tc.milvus})

			// Identity and ownership.
			g.Expect(job.Namespace).To(Equal("team-a"))
			g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{
				APIVersion: "memory.amemory.io/v1alpha1", Kind: "MemoryRestore", Name: "migrate", UID: restoreUID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}}))
			wantLabels := map[string]string{"app.kubernetes.io/name": "memory-operator", "app.kubernetes.io/component": "restore",
				"app.kubernetes.io/managed-by": "memory-operator"}
			for k, v := range tc.wantLabels {
				wantLabels[k] = v
			}
			g.Expect(job.Labels).To(Equal(wantLabels))
			g.Expect(job.Spec.Template.Labels).To(Equal(job.Labels))
			g.Expect(ManagedJobSelector().Matches(labels.Set(job.Labels))).To(BeTrue())
			g.Expect(*job.Spec.BackoffLimit).To(Equal(int32(1)))
			g.Expect(*job.Spec.PodReplacementPolicy).To(Equal(batchv1.Failed))

			// The command, parsed back with the worker's own parser.
			pod := job.Spec.Template.Spec
			g.Expect(pod.Containers).To(HaveLen(1))
			c := pod.Containers[0]
			g.Expect(c.Name).To(Equal("restore"))
			g.Expect(c.Image).To(Equal(restoreImage))
			g.Expect(c.Command).To(Equal([]string{"/memory-operator"}))
			g.Expect(c.Args[0]).To(Equal("restore"))
			cfg, err := worker.ParseRestoreArgs(c.Args[1:], io.Discard)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg).To(Equal(tc.wantConfig))
			g.Expect(jobRestoreConfig(job)).To(Equal(tc.wantConfig))
			g.Expect(c.TerminationMessagePolicy).To(Equal(corev1.TerminationMessageFallbackToLogsOnError))

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
				g.Expect(strings.ToLower(a)).NotTo(Or(ContainSubstring("password"), ContainSubstring("secret"), ContainSubstring("token")), "argument %q", a)
			}

			// The scope map, mounted read-only where --map-file points.
			tmp := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			g.Expect(pod.Volumes).To(Equal(append([]corev1.Volume{tmp}, tc.wantVolumes...)))
			wantMounts := []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
			if len(tc.wantVolumes) > 0 {
				wantMounts = append(wantMounts, corev1.VolumeMount{Name: "mapping", MountPath: "/etc/memory-operator/mapping", ReadOnly: true})
			}
			g.Expect(c.VolumeMounts).To(Equal(wantMounts))

			// The same least privilege as snapshot Jobs.
			g.Expect(pod.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
			g.Expect(pod.EnableServiceLinks).To(Equal(ptr.To(false)))
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
			tc.wantJob(g, job)
		})
	}
}

func TestMapFormat(t *testing.T) {
	cm := func(key string) *memoryv1alpha1.MappingSource {
		return &memoryv1alpha1.MappingSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: key}}
	}
	cases := []struct {
		src    *memoryv1alpha1.MappingSource
		want   string
		wantOK bool
	}{
		{cm("users.csv"), "csv", true},
		{cm("users.jsonl"), "jsonl", true},
		{&memoryv1alpha1.MappingSource{Object: &memoryv1alpha1.MappingObject{Key: "a/b.ndjson"}}, "jsonl", true},
		{&memoryv1alpha1.MappingSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "map.json"}}, "", false},
		{&memoryv1alpha1.MappingSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "users.csv"}, Format: memoryv1alpha1.MappingJSONLines}, "jsonl", true},
		{&memoryv1alpha1.MappingSource{Object: &memoryv1alpha1.MappingObject{Key: "ids"}, Format: memoryv1alpha1.MappingCSV}, "csv", true},
	}
	for _, tc := range cases {
		got, ok := mapFormat(tc.src)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("mapFormat(%s) = %q, %v; want %q, %v", mappingKey(tc.src), got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestRestoreSummaryInStatus(t *testing.T) {
	g := NewWithT(t)
	restore := builderRestore(func(r *memoryv1alpha1.MemoryRestore) { r.Spec.DryRun = true })
	restore.Status.Source = "snapshot/nightly"
	restore.Status.Package = &memoryv1alpha1.SnapshotLocation{Endpoint: "minio:9000", Bucket: "memory", Prefix: packagePath}
	recordRestoreSummary(restore, worker.RestoreSummary{
		ManifestSHA256: manifestSHA, FormatVersion: 1, PackageID: "p1", Shards: 2, DryRun: true, Embeddings: "Reuse",
		Restored: 12, RestoredByType: map[string]int64{"semantic": 12, "working": 0}, Scopes: 3, MappedScopes: 2, Vectors: 12,
		Rehydrated: 7, Skipped: worker.SkippedCount{Denylisted: 4, Unmapped: 1, Type: 5},
	}, restore.Status.Package)
	s := restore.Status
	g.Expect(s.RestoredByType).To(Equal(map[string]int64{"semantic": 12}))
	g.Expect(s.Skipped).To(Equal(int64(10)))
	g.Expect(s.SkippedBy).To(Equal(&memoryv1alpha1.RestoreSkipped{Denylisted: 4, Unmapped: 1, Type: 5}))
	g.Expect(s.Detail).To(BeNil(), "the worker wrote no detail")
	g.Expect(restoreResultMessage(restore)).To(Equal("Dry run: would restore 12 memories in 3 scopes into MemoryStore support-bot " +
		"from snapshot/nightly; 2 scopes mapped; skipped 10 (denylisted 4, unmapped 1, type 5); 7 archived memories rehydrated; 12 vectors (Reuse)"))
	g.Expect(s.Rehydrated).To(Equal(int64(7)))

	// Nothing skipped: no breakdown.
	recordRestoreSummary(restore, worker.RestoreSummary{ManifestSHA256: manifestSHA, FormatVersion: 1, Embeddings: "Defer", DetailKey: "k"}, restore.Status.Package)
	g.Expect(restore.Status.Skipped).To(BeZero())
	g.Expect(restore.Status.SkippedBy).To(BeNil())
	g.Expect(restore.Status.RestoredByType).To(BeNil())
	g.Expect(restore.Status.Rehydrated).To(BeZero())
	g.Expect(restore.Status.Detail).To(Equal(&memoryv1alpha1.ObjectLocation{Endpoint: "minio:9000", Bucket: "memory", Key: "k"}))
}
