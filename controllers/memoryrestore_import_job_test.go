package controllers

import (
	"errors"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// Pure tests of the import side of the restore Job builder: no API server.

// builderImport is builderRestore with an import source, its fields defaulted as the
// API server defaults them.
func builderImport(imp memoryv1alpha1.ImportSource, mutate func(*memoryv1alpha1.MemoryRestore)) *memoryv1alpha1.MemoryRestore {
	if imp.User.MetadataKey == "" {
		imp.User.MetadataKey = "user_id"
	}
	if imp.ScopeTemplate == "" {
		imp.ScopeTemplate = "user:{user}"
	}
	if imp.SkipZombies == nil {
		imp.SkipZombies = ptr.To(true)
	}
	return builderRestore(func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source = memoryv1alpha1.RestoreSource{ImportFrom: &imp}
		if mutate != nil {
			mutate(r)
		}
	})
}

func lgPostgres(schema string) *memoryv1alpha1.ImportPostgres {
	return &memoryv1alpha1.ImportPostgres{Schema: schema,
		URISecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "lg-db"}, Key: "uri"}}
}

func TestImportJobBuilder(t *testing.T) {
	store := builderStore("Postgres", inlineObjects())
	base := func(ic worker.ImportConfig) worker.RestoreConfig {
		return worker.RestoreConfig{
			RestoreNamespace: "team-a", RestoreName: "migrate", RestoreUID: restoreUID,
			TargetNamespace: "team-a", TargetName: "support-bot", Tenant: "acme",
			Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
			Embedder: "Hashing", EmbedderMaxInputBytes: 8192, EmbedderOverflow: "Truncate", Unmapped: "Keep", Types: []string{"episodic", "semantic", "procedural"},
			ConflictPolicy: "KeepNewer", Embeddings: "Reuse", Import: &ic,
		}
	}
	storeObjects := worker.Destination{Endpoint: "minio.storage:9000", Region: "eu-1", Insecure: true, Bucket: "memory"}
	storeCreds := map[string][2]string{
		worker.EnvPostgresURI:       {"support-bot-memory-worker", "uri"},
		worker.EnvSourceS3AccessKey: {"s3-creds", "accessKeyID"},
		worker.EnvSourceS3SecretKey: {"s3-creds", "secretAccessKey"},
	}
	withEnv := func(m map[string][2]string, k string, v [2]string) map[string][2]string {
		out := map[string][2]string{k: v}
		for k, v := range m {
			out[k] = v
		}
		return out
	}

	cases := []struct {
		name       string
		restore    *memoryv1alpha1.MemoryRestore
		wantConfig func() worker.RestoreConfig
		wantEnv    map[string][2]string
	}{
		{
			name: "LangGraphPostgres: the detail goes under the target store's prefix, the URI by reference",
			restore: builderImport(memoryv1alpha1.ImportSource{
				Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("langgraph"),
				User:              memoryv1alpha1.ImportUser{MetadataKey: "customer", ThreadIDPattern: `^u-(?P<user>[^:]+):`},
				SkipInactiveAfter: &metav1.Duration{Duration: 168 * time.Hour},
				KeepWorkingMemory: &memoryv1alpha1.ImportWorkingMemory{Enabled: true, Window: &metav1.Duration{Duration: 24 * time.Hour}},
				Store: &memoryv1alpha1.ImportStore{Namespaces: []memoryv1alpha1.StoreNamespaceRule{
					{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
					{Namespace: []string{"procedures", "{agent}"}, Scope: "agent:{agent}"}}},
			}, func(r *memoryv1alpha1.MemoryRestore) {
				r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Prefixes: []memoryv1alpha1.PrefixRename{{From: "user:", To: "user:acme-"}}}
				r.Spec.DryRun = true
			}),
			wantConfig: func() worker.RestoreConfig {
				c := base(worker.ImportConfig{Kind: "LangGraphPostgres", Schema: "langgraph", UserMetadataKey: "customer",
					UserPattern: `^u-(?P<user>[^:]+):`, ScopeTemplate: "user:{user}", InactiveAfter: 168 * time.Hour, SkipZombies: true,
					KeepWorking: true, WorkingWindow: 24 * time.Hour, Dir: "/tmp",
					Namespaces: []langgraphns.Rule{{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
						{Namespace: []string{"procedures", "{agent}"}, Scope: "agent:{agent}"}}})
				c.Source = storeObjects
				c.DetailKey = "memory-operator/acme/imports/migrate-5a6b7c8d/detail.jsonl.zst"
				c.PrefixMap = []worker.ScopeRule{{From: "user:", To: "user:acme-"}}
				c.DryRun = true
				// Working memory is kept: with spec.types unset, it is restored too.
				c.Types = []string{"episodic", "semantic", "procedural", "working"}
				return c
			},
			wantEnv: withEnv(storeCreds, worker.EnvImportPostgresURI, [2]string{"lg-db", "uri"}),
		},
		{
			name: "LangGraphSQLite in the target store's object storage: its credentials, the detail next to the file",
			restore: builderImport(memoryv1alpha1.ImportSource{
				Kind: memoryv1alpha1.ImportLangGraphSQLite, File: &memoryv1alpha1.ImportFile{Key: "exports/support/checkpoints.sqlite"},
				ScopeTemplate: "session:{thread}", SkipZombies: ptr.To(false), Store: &memoryv1alpha1.ImportStore{Skip: true},
			}, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Types = []memoryv1alpha1.MemoryType{"episodic"} }),
			wantConfig: func() worker.RestoreConfig {
				c := base(worker.ImportConfig{Kind: "LangGraphSQLite", Object: "exports/support/checkpoints.sqlite",
					UserMetadataKey: "user_id", ScopeTemplate: "session:{thread}", SkipStore: true, Dir: "/tmp"})
				c.Source = storeObjects
				c.DetailKey = "exports/support/imports/migrate-5a6b7c8d/detail.jsonl.zst"
				c.Types = []string{"episodic"}
				return c
			},
			wantEnv: storeCreds,
		},
		{
			name: "LangGraphSQLite in another bucket with its own credentials, at the bucket's root",
			restore: builderImport(memoryv1alpha1.ImportSource{
				Kind: memoryv1alpha1.ImportLangGraphSQLite,
				File: &memoryv1alpha1.ImportFile{Endpoint: "s3.eu-west-1.amazonaws.com", Bucket: "agents-prod", Key: "lg.sqlite",
					Region: "eu-west-1", CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "aws", AccessKeyIDKey: "id"}},
			}, nil),
			wantConfig: func() worker.RestoreConfig {
				c := base(worker.ImportConfig{Kind: "LangGraphSQLite", Object: "lg.sqlite", UserMetadataKey: "user_id",
					ScopeTemplate: "user:{user}", SkipZombies: true, Dir: "/tmp"})
				c.Source = worker.Destination{Endpoint: "s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "agents-prod"}
				c.DetailKey = "imports/migrate-5a6b7c8d/detail.jsonl.zst"
				return c
			},
			wantEnv: map[string][2]string{
				worker.EnvPostgresURI:       {"support-bot-memory-worker", "uri"},
				worker.EnvSourceS3AccessKey: {"aws", "id"},
				worker.EnvSourceS3SecretKey: {"aws", "secretAccessKey"},
			},
		},
		{
			name: "LangChainPostgresHistory: the table in the database, sessions as scopes",
			restore: builderImport(memoryv1alpha1.ImportSource{
				Kind: memoryv1alpha1.ImportLangChainPostgresHistory, Postgres: &memoryv1alpha1.ImportPostgres{
					URISecret: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "lg-db"}, Key: "uri"}, Table: "chat_history"},
				ScopeTemplate: "session:{thread}",
			}, nil),
			wantConfig: func() worker.RestoreConfig {
				c := base(worker.ImportConfig{Kind: "LangChainPostgresHistory", Table: "chat_history", UserMetadataKey: "user_id",
					ScopeTemplate: "session:{thread}", SkipZombies: true, Dir: "/tmp"})
				c.Source = storeObjects
				c.DetailKey = "memory-operator/acme/imports/migrate-5a6b7c8d/detail.jsonl.zst"
				return c
			},
			wantEnv: withEnv(storeCreds, worker.EnvImportPostgresURI, [2]string{"lg-db", "uri"}),
		},
		{
			name: "LettaAgentFile in the target store's object storage",
			restore: builderImport(memoryv1alpha1.ImportSource{
				Kind: memoryv1alpha1.ImportLettaAgentFile, File: &memoryv1alpha1.ImportFile{Key: "exports/support.af"},
				ScopeTemplate: "agent:{thread}",
			}, nil),
			wantConfig: func() worker.RestoreConfig {
				c := base(worker.ImportConfig{Kind: "LettaAgentFile", Object: "exports/support.af", UserMetadataKey: "user_id",
					ScopeTemplate: "agent:{thread}", SkipZombies: true, Dir: "/tmp"})
				c.Source = storeObjects
				c.DetailKey = "exports/imports/migrate-5a6b7c8d/detail.jsonl.zst"
				return c
			},
			wantEnv: storeCreds,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(validateImport(tc.restore.Spec.Source.ImportFrom)).To(Succeed())
			plan, err := planImport(tc.restore, store, store.Spec.Backend.ObjectStorage)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(plan.Key).To(BeNil(), "an import reads no package: no key")
			job := buildRestoreJob(tc.restore, store, restoreJobInputs{Image: restoreImage, Source: plan})

			// The arguments parse back, with the worker's own parser, into the import.
			c := job.Spec.Template.Spec.Containers[0]
			g.Expect(c.Args[0]).To(Equal("restore"))
			cfg, err := worker.ParseRestoreArgs(c.Args[1:], io.Discard)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg).To(Equal(tc.wantConfig()))
			g.Expect(cfg.Source.Prefix).To(BeEmpty(), "no package prefix")
			g.Expect(c.Args).NotTo(ContainElement(ContainSubstring("postgres://")))

			// Secrets by reference only; no package key.
			gotEnv := map[string][2]string{}
			for _, e := range c.Env {
				g.Expect(e.Value).To(BeEmpty(), "env %s has a literal value", e.Name)
				g.Expect(e.ValueFrom.SecretKeyRef).NotTo(BeNil(), "env %s is not from a Secret", e.Name)
				gotEnv[e.Name] = [2]string{e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key}
			}
			g.Expect(gotEnv).To(Equal(tc.wantEnv))
			g.Expect(gotEnv).NotTo(HaveKey(worker.EnvSourceKey))

			// The scratch space is the pod's /tmp emptyDir, under a read-only root.
			pod := job.Spec.Template.Spec
			g.Expect(pod.Volumes).To(ContainElement(corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}))
			g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "tmp", MountPath: cfg.Import.Dir}))
			g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
		})
	}
}

// Where an import's object storage cannot be planned, the restore waits with a reason
// that says what to set.
func TestImportPlanNeedsObjectStorage(t *testing.T) {
	clusterStore := builderStore("Postgres", nil)
	clusterStore.Spec.Backend = memoryv1alpha1.StoreBackend{ClusterBackend: "shared"}
	clusterStore.Status.ObjectStorage = &memoryv1alpha1.ObjectStorageStatus{Endpoint: "minio.storage:9000", Bucket: "memory", Prefix: "memory-operator/acme/"}
	cases := []struct {
		name    string
		imp     memoryv1alpha1.ImportSource
		store   *memoryv1alpha1.MemoryStore
		objects *memoryv1alpha1.ObjectStorageSpec
		want    string
	}{
		{"a database import into a store without object storage",
			memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("")},
			builderStore("Postgres", nil), nil,
			"MemoryStore support-bot has no object storage, where the per-scope detail of an import from LangGraphPostgres goes; give the store object storage"},
		{"a database import into a store on a ClusterMemoryBackend",
			memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("")},
			clusterStore, inlineObjects(),
			"MemoryStore support-bot uses ClusterMemoryBackend shared, whose object-storage credentials never leave the operator's namespace, " +
				"and the per-scope detail of an import from LangGraphPostgres needs them; import into a store with inline object storage"},
		{"a file on another endpoint without credentials",
			memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphSQLite, File: &memoryv1alpha1.ImportFile{Endpoint: "s3.example:443", Bucket: "b", Key: "lg.sqlite"}},
			builderStore("Postgres", inlineObjects()), inlineObjects(),
			"importFrom.file.endpoint s3.example:443 is not MemoryStore support-bot's object storage; set importFrom.file.credentialsSecret"},
		{"a file in the store's storage of a ClusterMemoryBackend",
			memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphSQLite, File: &memoryv1alpha1.ImportFile{Key: "lg.sqlite"}},
			clusterStore, inlineObjects(),
			"MemoryStore support-bot uses ClusterMemoryBackend shared, whose object-storage credentials never leave the operator's namespace; " +
				"set importFrom.file.credentialsSecret to a Secret in namespace team-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := planImport(builderImport(tc.imp, nil), tc.store, tc.objects)
			var se *stepError
			g.Expect(errors.As(err, &se)).To(BeTrue(), "want a stepError, got %v", err)
			g.Expect(se.reason).To(Equal(memoryv1alpha1.ReasonObjectStorageMissing))
			g.Expect(se.message).To(Equal(tc.want))
		})
	}
}

func TestValidateImport(t *testing.T) {
	cases := []struct {
		name       string
		imp        memoryv1alpha1.ImportSource
		wantReason string // "" when valid
		wantMsg    string
	}{
		{"named group", memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-(?P<user>[^:]+):`}}, "", ""},
		{"first group", memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^([0-9]+)-`}}, "", ""},
		{"does not compile", memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-(?P<user>[^:]+`}},
			memoryv1alpha1.ReasonInvalidThreadIDPattern,
			"importFrom.user.threadIdPattern \"^u-(?P<user>[^:]+\" is not an RE2 regular expression: error parsing regexp: missing closing ): `^u-(?P<user>[^:]+`"},
		{"Perl, not RE2", memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-(\d+)(?=:)`}},
			memoryv1alpha1.ReasonInvalidThreadIDPattern,
			"importFrom.user.threadIdPattern \"^u-(\\\\d+)(?=:)\" is not an RE2 regular expression: error parsing regexp: invalid or unsupported Perl syntax: `(?=`"},
		{"no group", memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-[0-9]+`}},
			memoryv1alpha1.ReasonInvalidThreadIDPattern,
			"importFrom.user.threadIdPattern \"^u-[0-9]+\" has no group: the group named \"user\", or else the first group, is the user id (for instance ^u-(?P<user>[^:]+):)"},
		{"store rules", memoryv1alpha1.ImportSource{Store: &memoryv1alpha1.ImportStore{Namespaces: []memoryv1alpha1.StoreNamespaceRule{
			{Namespace: []string{"memories", "{user}"}, Scope: "user:{customer}"}}}},
			memoryv1alpha1.ReasonInvalidStoreNamespaces, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := validateImport(&tc.imp)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var rf *runFailure
			g.Expect(errors.As(err, &rf)).To(BeTrue(), "want a runFailure, got %v", err)
			g.Expect(rf.reason).To(Equal(tc.wantReason))
			if tc.wantMsg != "" {
				g.Expect(rf.message).To(Equal(tc.wantMsg))
			} else {
				g.Expect(rf.message).To(HavePrefix("importFrom.store.namespaces: "))
			}
		})
	}
}

func TestImportFailureReason(t *testing.T) {
	for msg, want := range map[string]string{
		`memory-operator restore: source database: langgraph postgres: no "lg"."checkpoint_migrations" table: this is not a langgraph-checkpoint-postgres database (or not its schema)`: memoryv1alpha1.ReasonNotACheckpointer,
		"memory-operator restore: langgraph sqlite: /tmp/import-1/source has no checkpoints and writes tables: not a langgraph-checkpoint-sqlite file":                                  memoryv1alpha1.ReasonNotACheckpointer,
		"memory-operator restore: langgraph sqlite: /tmp/import-1/source is not a readable SQLite database: file is not a database":                                                     memoryv1alpha1.ReasonNotACheckpointer,
		"memory-operator restore: source database: unsupported format: langgraph-checkpoint-postgres schema version 12 (this importer reads versions 4 to 9)":                           memoryv1alpha1.ReasonUnsupportedFormat,
		"memory-operator restore: source database: langgraph postgres: failed to connect to `user=lg database=lg`: 10.0.0.7:5432 (pg): dial error: connection refused":                  memoryv1alpha1.ReasonSourceUnreachable,
		"memory-operator restore: source database: langgraph postgres: failed to connect to `user=lg database=lg`: password authentication failed for user \"lg\" (SQLSTATE 28P01)":     memoryv1alpha1.ReasonAuthenticationFailed,
		"memory-operator restore: source database: the connection URI does not parse":                                                                                                   memoryv1alpha1.ReasonSourceUnreachable,
		"memory-operator restore: source file s3://agents/lg.sqlite: The specified key does not exist.":                                                                                 memoryv1alpha1.ReasonSourceUnreachable,
		"memory-operator restore: target: pgstore: connection reset by peer":                                                                                                            memoryv1alpha1.ReasonFailed,
		"": memoryv1alpha1.ReasonFailed,
	} {
		if got := importFailureReason(msg); got != want {
			t.Errorf("importFailureReason(%q) = %s, want %s", msg, got, want)
		}
	}
}

func TestImportSummaryInStatus(t *testing.T) {
	g := NewWithT(t)
	restore := builderImport(memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("")}, nil)
	restore.Status.Source = restore.Spec.Source.SourceDescription()
	g.Expect(restore.Status.Source).To(Equal("LangGraphPostgres secret/lg-db"))
	stats := &importer.Stats{Threads: 200, Imported: 120, Inactive: 40, Zombie: 30, NoUser: 6, Empty: 1, Unsupported: 3,
		StoreItems: 12, StoreSkipped: 2, Items: 410, FirstProblem: "thread t-9: unsupported format: pickle"}
	recordRestoreSummary(restore, worker.RestoreSummary{ManifestSHA256: manifestSHA, FormatVersion: 1, Embeddings: "Reembed",
		Read: 410, Restored: 410, Scopes: 50, Vectors: 410, DetailKey: "memory-operator/acme/imports/migrate-5a6b7c8d/detail.jsonl.zst", Import: stats},
		&memoryv1alpha1.SnapshotLocation{Endpoint: "minio:9000", Bucket: "memory"})
	s := restore.Status
	g.Expect(s.Import).To(Equal(&memoryv1alpha1.ImportStatus{Threads: 200, Imported: 120, Inactive: 40, Zombie: 30, NoUser: 6, Empty: 1,
		Unsupported: 3, StoreItems: 12, StoreSkipped: 2, Items: 410, FirstProblem: "thread t-9: unsupported format: pickle"}))
	g.Expect(s.Detail).To(Equal(&memoryv1alpha1.ObjectLocation{Endpoint: "minio:9000", Bucket: "memory",
		Key: "memory-operator/acme/imports/migrate-5a6b7c8d/detail.jsonl.zst"}))
	g.Expect(restoreResultMessage(restore)).To(Equal("Imported 410 memories in 50 scopes into MemoryStore support-bot from LangGraphPostgres secret/lg-db; " +
		"200 threads read (120 imported, 40 inactive, 30 zombie, 6 no user, 1 empty, 3 unsupported), 12 store items (2 left out); " +
		"410 vectors (Reembed); per-scope detail in s3://memory/memory-operator/acme/imports/migrate-5a6b7c8d/detail.jsonl.zst"))

	// A package restore's summary has no import counts.
	recordRestoreSummary(restore, worker.RestoreSummary{ManifestSHA256: manifestSHA, FormatVersion: 1, Embeddings: "Reuse"}, nil)
	g.Expect(restore.Status.Import).To(BeNil())
}
