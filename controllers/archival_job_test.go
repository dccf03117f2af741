package controllers

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// Pure tests of the archive Job builder and cold-storage planning: no API server.

// archivalStore is builderStore with an archival spec and a UID.
func archivalStore(engine string, objects *memoryv1alpha1.ObjectStorageSpec, mutate func(*memoryv1alpha1.ArchivalSpec)) *memoryv1alpha1.MemoryStore {
	s := builderStore(engine, objects)
	s.UID = testUID
	s.Spec.Archival = &memoryv1alpha1.ArchivalSpec{Schedule: "0 3 * * *", Threshold: "0.05"}
	if mutate != nil {
		mutate(s.Spec.Archival)
	}
	return s
}

func withCold(key *corev1.SecretKeySelector) func(*memoryv1alpha1.ArchivalSpec) {
	return func(a *memoryv1alpha1.ArchivalSpec) {
		enc := &memoryv1alpha1.SnapshotEncryption{KeySecret: key, Unencrypted: key == nil}
		a.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{Enabled: true, Encryption: enc}
	}
}

var coldKey = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cold-key"}, Key: "key"}

// archiveInputs resolves the Job's inputs as the controller does, without Secrets.
func archiveInputs(t *testing.T, store *memoryv1alpha1.MemoryStore, slot, now time.Time, milvus string) archiveJobInputs {
	t.Helper()
	threshold, halfLives, err := archivalParameters(store.Spec.Archival)
	if err != nil {
		t.Fatal(err)
	}
	name := archiveJobName(store, slot)
	in := archiveJobInputs{Image: "img:1", Name: name, Slot: slot, Now: now, Threshold: threshold, HalfLives: halfLives, MilvusAddress: milvus}
	if store.Spec.Archival.ColdStorageEnabled() {
		if in.Cold, err = planCold(store, store.Spec.Backend.ObjectStorage, name); err != nil {
			t.Fatal(err)
		}
	}
	return in
}

func TestArchiveJobName(t *testing.T) {
	g := NewWithT(t)
	slot := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	store := archivalStore("Postgres", nil, nil)
	g.Expect(archiveJobName(store, slot)).To(Equal("support-bot-archive-202611300300"))
	g.Expect(archiveJobName(store, slot.In(time.FixedZone("CET", 3600)))).To(Equal("support-bot-archive-202611300300"), "slots are named in UTC")
	g.Expect(archiveJobName(store, slot.Add(time.Minute))).NotTo(Equal(archiveJobName(store, slot)))

	// Long store names are cut and told apart by their UID.
	a, b := store.DeepCopy(), store.DeepCopy()
	a.Name = strings.Repeat("a", 60) + "-one"
	b.Name, b.UID = strings.Repeat("a", 60)+"-two", "2e1f5d0b-0000-4000-8000-000000000000"
	na, nb := archiveJobName(a, slot), archiveJobName(b, slot)
	g.Expect(na).To(HaveLen(maxJobName))
	g.Expect(validation.IsDNS1123Label(na)).To(BeEmpty())
	g.Expect(na).To(Equal(strings.Repeat("a", 33) + "-1f0e4c9a-archive-202611300300"))
	g.Expect(nb).NotTo(Equal(na))
}

func TestArchivalParameters(t *testing.T) {
	g := NewWithT(t)
	threshold, halfLives, err := archivalParameters(&memoryv1alpha1.ArchivalSpec{Threshold: "0.25",
		HalfLives: map[string]memoryv1alpha1.HalfLife{"episodic": "48h", "working": "90m"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(threshold).To(Equal(0.25))
	want := memory.DefaultHalfLives()
	want[memory.Episodic], want[memory.Working] = 48*time.Hour, 90*time.Minute
	g.Expect(halfLives).To(Equal(want), "declared half-lives over the defaults")

	_, halfLives, err = archivalParameters(&memoryv1alpha1.ArchivalSpec{Threshold: "0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(halfLives).To(Equal(memory.DefaultHalfLives()))

	// The backstops, for a CRD installed without its validations.
	for _, spec := range []memoryv1alpha1.ArchivalSpec{
		{Threshold: "-1"}, {Threshold: "NaN"}, {Threshold: "lots"},
		{Threshold: "0.1", HalfLives: map[string]memoryv1alpha1.HalfLife{"emotional": "1h"}},
		{Threshold: "0.1", HalfLives: map[string]memoryv1alpha1.HalfLife{"working": "30d"}},
		{Threshold: "0.1", HalfLives: map[string]memoryv1alpha1.HalfLife{"working": "0s"}},
	} {
		_, _, err := archivalParameters(&spec)
		var se *stepError
		g.Expect(errors.As(err, &se)).To(BeTrue(), "%+v: %v", spec, err)
		g.Expect(se.reason).To(Equal(memoryv1alpha1.ReasonInvalidSpec))
	}
}

func TestArchiveJobBuilder(t *testing.T) {
	slot := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	now := slot.Add(42 * time.Second)
	resources := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	cases := []struct {
		name     string
		engine   string
		milvus   string
		objects  *memoryv1alpha1.ObjectStorageSpec
		mutate   func(*memoryv1alpha1.ArchivalSpec)
		want     func(cfg *worker.ArchiveConfig)
		wantEnvs map[string][2]string
	}{
		{
			name: "defaults, vectors in PostgreSQL", engine: "Postgres",
			want:     func(*worker.ArchiveConfig) {},
			wantEnvs: map[string][2]string{worker.EnvPostgresURI: {"support-bot-memory-worker", "uri"}},
		},
		{
			name: "Milvus, dry run, half-lives", engine: "Milvus", milvus: "milvus.vectors:19530",
			mutate: func(a *memoryv1alpha1.ArchivalSpec) {
				a.DryRun = true
				a.Threshold = "0.125"
				a.HalfLives = map[string]memoryv1alpha1.HalfLife{"procedural": "24h"}
			},
			want: func(c *worker.ArchiveConfig) {
				c.VectorEngine, c.MilvusAddress, c.Collection = "Milvus", "milvus.vectors:19530", "mem_acme"
				c.DryRun, c.Threshold = true, 0.125
				c.HalfLives[memory.Procedural] = 24 * time.Hour
			},
			wantEnvs: map[string][2]string{worker.EnvPostgresURI: {"support-bot-memory-worker", "uri"}},
		},
		{
			name: "cold storage, encrypted, deleteAfter", engine: "Postgres", objects: inlineObjects(),
			mutate: func(a *memoryv1alpha1.ArchivalSpec) {
				withCold(coldKey)(a)
				a.ColdStorage.DeleteAfter = &metav1.Duration{Duration: 2160 * time.Hour}
				a.Job = memoryv1alpha1.JobOptions{ActiveDeadlineSeconds: ptr.To[int64](600), Resources: resources}
			},
			want: func(c *worker.ArchiveConfig) {
				c.Cold = &worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory",
					Prefix: "memory-operator/acme/archive/support-bot-archive-202611300300/"}
				c.DeleteAfter = 2160 * time.Hour
			},
			wantEnvs: map[string][2]string{
				worker.EnvPostgresURI:   {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey:   {"s3-creds", "accessKeyID"},
				worker.EnvS3SecretKey:   {"s3-creds", "secretAccessKey"},
				worker.EnvEncryptionKey: {"cold-key", "key"},
			},
		},
		{
			name: "cold storage, unencrypted, own credentials", engine: "Postgres", objects: inlineObjects(),
			mutate: func(a *memoryv1alpha1.ArchivalSpec) {
				withCold(nil)(a)
				a.ColdStorage.CredentialsSecret = &memoryv1alpha1.ObjectStorageCredentials{Name: "archiver"}
			},
			want: func(c *worker.ArchiveConfig) {
				c.Cold = &worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory",
					Prefix: "memory-operator/acme/archive/support-bot-archive-202611300300/"}
				c.Unencrypted = true
			},
			wantEnvs: map[string][2]string{
				worker.EnvPostgresURI: {"support-bot-memory-worker", "uri"},
				worker.EnvS3AccessKey: {"archiver", "accessKeyID"},
				worker.EnvS3SecretKey: {"archiver", "secretAccessKey"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			store := archivalStore(tc.engine, tc.objects, tc.mutate)
			job := buildArchiveJob(store, archiveInputs(t, store, slot, now, tc.milvus))

			g.Expect(job.Name).To(Equal("support-bot-archive-202611300300"))
			g.Expect(job.Namespace).To(Equal("team-a"))
			g.Expect(metav1.IsControlledBy(job, store)).To(BeTrue())
			g.Expect(job.OwnerReferences[0].Kind).To(Equal("MemoryStore"))
			g.Expect(job.Labels).To(HaveKeyWithValue("app.kubernetes.io/component", "archive"))
			g.Expect(job.Labels).To(HaveKeyWithValue(labelManagedBy, managedBy))
			g.Expect(job.Labels).To(HaveKeyWithValue(memoryv1alpha1.LabelStore, "support-bot"))
			g.Expect(jobSlot(job)).To(BeTemporally("==", slot))

			// The arguments are the worker's contract: they parse back into the config.
			cfg, err := jobArchiveConfig(job)
			g.Expect(err).NotTo(HaveOccurred())
			want := worker.ArchiveConfig{
				StoreNamespace: "team-a", StoreName: "support-bot", Tenant: "acme", RunName: job.Name, Schema: "mem_acme",
				Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
				Now: now, Threshold: 0.05, HalfLives: memory.DefaultHalfLives(),
			}
			tc.want(&want)
			g.Expect(cfg).To(Equal(want))
			if cfg.Cold != nil {
				g.Expect(cfg.Cold.Prefix).To(Equal(store.Status.ObjectStorage.Prefix + worker.ArchiveFolder + job.Name + "/"))
			}

			// Secrets reach the pod only by reference; nothing else is in the environment.
			c := job.Spec.Template.Spec.Containers[0]
			g.Expect(c.Name).To(Equal(archiveContainer))
			g.Expect(c.Args[0]).To(Equal("archive"))
			for _, e := range c.Env {
				g.Expect(e.Value).To(BeEmpty(), "env %s carries a literal value", e.Name)
			}
			g.Expect(envSecretRefs(job)).To(Equal(tc.wantEnvs))
			g.Expect(strings.Join(c.Args, " ")).NotTo(ContainSubstring("secret"))

			// The shared builder's least privilege, and the store's Job knobs.
			pod := job.Spec.Template.Spec
			g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
			g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
			g.Expect(*job.Spec.BackoffLimit).To(Equal(workerBackoffLimit))
			deadline := defaultActiveDeadline
			if d := store.Spec.Archival.Job.ActiveDeadlineSeconds; d != nil {
				deadline = *d
			}
			g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(deadline))
			if r := store.Spec.Archival.Job.Resources; r != nil {
				g.Expect(c.Resources).To(Equal(*r))
			}
		})
	}
}

func TestPlanCold(t *testing.T) {
	g := NewWithT(t)
	const job = "support-bot-archive-202611300300"

	// A store without object storage has nowhere to put cold packages.
	store := archivalStore("Postgres", nil, withCold(coldKey))
	_, err := planCold(store, nil, job)
	var se *stepError
	g.Expect(errors.As(err, &se)).To(BeTrue())
	g.Expect(se.reason).To(Equal(memoryv1alpha1.ReasonObjectStorageMissing))

	// A store on a ClusterMemoryBackend must name credentials of its own.
	store = archivalStore("Postgres", inlineObjects(), withCold(coldKey))
	shared := store.Spec.Backend.ObjectStorage
	store.Spec.Backend = memoryv1alpha1.StoreBackend{ClusterBackend: "shared"}
	_, err = planCold(store, shared, job)
	g.Expect(errors.As(err, &se)).To(BeTrue())
	g.Expect(se.reason).To(Equal(memoryv1alpha1.ReasonObjectStorageMissing))
	g.Expect(se.message).To(ContainSubstring("set archival.coldStorage.credentialsSecret"))
	store.Spec.Archival.ColdStorage.CredentialsSecret = &memoryv1alpha1.ObjectStorageCredentials{Name: "tenant-s3", AccessKeyIDKey: "id"}
	plan, err := planCold(store, shared, job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(plan.Credentials).To(Equal(memoryv1alpha1.ObjectStorageCredentials{Name: "tenant-s3", AccessKeyIDKey: "id", SecretAccessKeyKey: "secretAccessKey"}))
	g.Expect(plan.Key).To(Equal(coldKey))
	g.Expect(plan.Destination.Prefix).To(Equal("memory-operator/acme/archive/" + job + "/"))
}

func TestArchiveSummaryIntoStatus(t *testing.T) {
	g := NewWithT(t)
	sum := worker.ArchiveSummary{Now: time.Now(), Scanned: 300, Archived: 12,
		ArchivedByType: map[string]int64{"episodic": 10, "working": 2, "semantic": 0},
		ExpiredPurged:  3, Deleted: 4, VectorsDeleted: 15, Recovered: 1,
		ColdPackage: "memory-operator/acme/archive/j/", ColdItems: 12}
	cfg := worker.ArchiveConfig{Cold: &worker.Destination{Endpoint: "minio:9000", Bucket: "memory", Prefix: "memory-operator/acme/archive/j/"}}
	run := &memoryv1alpha1.ArchivalRun{JobName: "j"}
	recordArchiveSummary(run, sum, cfg, nil)
	g.Expect(run.ArchivedByType).To(Equal(map[string]int64{"episodic": 10, "working": 2}))
	g.Expect(run.ColdPackage).To(Equal(&memoryv1alpha1.SnapshotLocation{Endpoint: "minio:9000", Bucket: "memory", Prefix: "memory-operator/acme/archive/j/"}))
	g.Expect(run.Message).To(Equal("Archived 12 of 300 memories (working 2, episodic 10); purged 3 expired; " +
		"deleted 4 archived past deleteAfter; 15 vectors deleted (1 left by an interrupted run); " +
		"cold package s3://memory/memory-operator/acme/archive/j/ (12 memories)"))

	sum = worker.ArchiveSummary{Now: time.Now(), DryRun: true, Scanned: 5, Archived: 1, ArchivedByType: map[string]int64{"semantic": 1}}
	run = &memoryv1alpha1.ArchivalRun{JobName: "j"}
	recordArchiveSummary(run, sum, worker.ArchiveConfig{}, nil)
	g.Expect(run.DryRun).To(BeTrue())
	g.Expect(run.ColdPackage).To(BeNil())
	g.Expect(run.Message).To(Equal("Dry run: would archive 1 of 5 memories (semantic 1); would purge 0 expired; 0 vectors deleted"))
}

// The Job's arguments must parse whatever the builder wrote: a sanity check that the
// worker's parser reads them the same way for every declared type.
func TestArchiveJobArgsParseForEveryHalfLife(t *testing.T) {
	g := NewWithT(t)
	store := archivalStore("Postgres", nil, func(a *memoryv1alpha1.ArchivalSpec) {
		a.HalfLives = map[string]memoryv1alpha1.HalfLife{"working": "1h", "episodic": "2h", "semantic": "3h", "procedural": "4h"}
	})
	slot := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := buildArchiveJob(store, archiveInputs(t, store, slot, slot, ""))
	args, err := jobWorkerArgs(job, archiveContainer)
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := worker.ParseArchiveArgs(args, io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.HalfLives).To(Equal(memory.HalfLives{memory.Working: time.Hour, memory.Episodic: 2 * time.Hour,
		memory.Semantic: 3 * time.Hour, memory.Procedural: 4 * time.Hour}))
}
