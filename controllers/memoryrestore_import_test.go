package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/worker"
	"github.com/amemory/memory-operator/test/importers"
)

// importRestore is a MemoryRestore of target that imports imp.
func importRestore(namespace, name, target string, imp memoryv1alpha1.ImportSource) *memoryv1alpha1.MemoryRestore {
	return newRestore(namespace, name, "", target, func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source = memoryv1alpha1.RestoreSource{ImportFrom: &imp}
	})
}

// lgThreadIDPattern finds the user in the generated thread ids that carry it
// ("u-<user>:sess-<n>"); the others have it in their metadata.
const lgThreadIDPattern = `^u-(?P<user>[^:]+):`

func TestMemoryRestoreImportAdmission(t *testing.T) {
	ns := newNamespace(t)
	pg := func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source = memoryv1alpha1.RestoreSource{ImportFrom: &memoryv1alpha1.ImportSource{
			Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("")}}
	}
	sqlite := func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source = memoryv1alpha1.RestoreSource{ImportFrom: &memoryv1alpha1.ImportSource{
			Kind: memoryv1alpha1.ImportLangGraphSQLite, File: &memoryv1alpha1.ImportFile{Key: "exports/lg.sqlite"}}}
	}
	then := func(first func(*memoryv1alpha1.MemoryRestore), next func(*memoryv1alpha1.MemoryRestore)) func(*memoryv1alpha1.MemoryRestore) {
		return func(r *memoryv1alpha1.MemoryRestore) { first(r); next(r) }
	}
	const exactlyOne = "set exactly one of source.snapshotRef, source.location or source.importFrom"
	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.MemoryRestore)
		want   string // "" when the API server accepts it
	}{
		{"LangGraphPostgres", pg, ""},
		{"LangGraphSQLite", sqlite, ""},
		{"every option", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			imp := r.Spec.Source.ImportFrom
			imp.Postgres.Schema = "langgraph"
			imp.User = memoryv1alpha1.ImportUser{MetadataKey: "customer", ThreadIDPattern: lgThreadIDPattern}
			imp.ScopeTemplate = "session:u-{user}.{thread}"
			imp.SkipInactiveAfter = &metav1.Duration{Duration: 168 * time.Hour}
			imp.SkipZombies = ptr.To(false)
			imp.KeepWorkingMemory = &memoryv1alpha1.ImportWorkingMemory{Enabled: true, Window: &metav1.Duration{Duration: time.Hour}}
			imp.Store = &memoryv1alpha1.ImportStore{Namespaces: []memoryv1alpha1.StoreNamespaceRule{{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"}}}
			r.Spec.DryRun = true
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Prefixes: []memoryv1alpha1.PrefixRename{{From: "user:", To: "user:acme-"}}}
		}), ""},
		{"a file elsewhere", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.File = &memoryv1alpha1.ImportFile{Endpoint: "s3.eu-west-1.amazonaws.com", Bucket: "agents", Key: "lg.sqlite",
				Region: "eu-west-1", Insecure: ptr.To(false), CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "aws"}}
		}), ""},
		{"import and snapshot", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.SnapshotRef = &corev1.LocalObjectReference{Name: "nightly"}
		}), exactlyOne},
		{"import and location", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.Location = &memoryv1alpha1.PackageLocation{Endpoint: "s3.example:443", Bucket: "dr", Prefix: "p/",
				CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "dr-s3"}}
		}), exactlyOne},
		{"import with a package key", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.KeySecret = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "k"}, Key: "key"}
		}), "source.importFrom reads no package: leave out source.keySecret and source.unencrypted"},
		{"import unencrypted", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.Unencrypted = true }),
			"source.importFrom reads no package: leave out source.keySecret and source.unencrypted"},
		{"LangGraphPostgres without postgres", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.Postgres = nil }),
			"importFrom.kind LangGraphPostgres and LangChainPostgresHistory need importFrom.postgres"},
		{"LangGraphSQLite without file", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.File = nil }),
			"importFrom.kind LangGraphSQLite, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState and CrewAI need importFrom.file"},
		{"LangGraphSQLite with a database", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.Postgres = lgPostgres("") }),
			"importFrom.postgres is only for kinds LangGraphPostgres and LangChainPostgresHistory"},
		{"LangGraphPostgres with a file", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.File = &memoryv1alpha1.ImportFile{Key: "lg.sqlite"}
		}), "importFrom.file is only for kinds LangGraphSQLite, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState and CrewAI"},
		{"a kind no importer reads", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.Kind = "Mem0Qdrant" }),
			`spec.source.importFrom.kind: Unsupported value: "Mem0Qdrant"`},
		{"LettaAgentFile", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Kind = memoryv1alpha1.ImportLettaAgentFile
			r.Spec.Source.ImportFrom.ScopeTemplate = "agent:{thread}"
		}), ""},
		{"LangChainPostgresHistory", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Kind = memoryv1alpha1.ImportLangChainPostgresHistory
			r.Spec.Source.ImportFrom.Postgres.Table = "chat_history"
			r.Spec.Source.ImportFrom.ScopeTemplate = "session:{thread}"
		}), ""},
		{"LangChainPostgresHistory without a table", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Kind = memoryv1alpha1.ImportLangChainPostgresHistory
		}), "importFrom.kind LangChainPostgresHistory needs importFrom.postgres.table"},
		{"LettaAgentFile with a database", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Kind = memoryv1alpha1.ImportLettaAgentFile
		}), "importFrom.kind LangGraphSQLite, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState and CrewAI need importFrom.file"},
		{"a URI Secret without a name", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.Postgres.URISecret.Name = "" }),
			"importFrom.postgres.uriSecret needs a name"},
		{"a bad schema", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.Postgres.Schema = "lang graph" }),
			"spec.source.importFrom.postgres.schema"},
		{"a bad file key", then(sqlite, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.File.Key = "/exports/lg.sqlite" }),
			"spec.source.importFrom.file.key"},
		{"a scope template of another kind", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.ScopeTemplate = "customer:{user}" }),
			"spec.source.importFrom.scopeTemplate"},
		{"a scope template with an unknown placeholder", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.ScopeTemplate = "user:{name}" }),
			"spec.source.importFrom.scopeTemplate"},
		{"a scope template with a space", then(pg, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.ScopeTemplate = "user: {user}" }),
			"spec.source.importFrom.scopeTemplate"},
		{"a window without working memory", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.KeepWorkingMemory = &memoryv1alpha1.ImportWorkingMemory{Window: &metav1.Duration{Duration: time.Hour}}
		}), "keepWorkingMemory.window needs keepWorkingMemory.enabled: true"},
		{"a negative inactivity window", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.SkipInactiveAfter = &metav1.Duration{Duration: -time.Hour}
		}), `skipInactiveAfter is a positive duration such as "168h"`},
		{"store skipped and mapped", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Store = &memoryv1alpha1.ImportStore{Skip: true,
				Namespaces: []memoryv1alpha1.StoreNamespaceRule{{Namespace: []string{"memories", "{user}"}, Scope: "user:{user}"}}}
		}), "set store.skip or store.namespaces, not both"},
		{"a store rule without a namespace", then(pg, func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Source.ImportFrom.Store = &memoryv1alpha1.ImportStore{Namespaces: []memoryv1alpha1.StoreNamespaceRule{{Scope: "user:{user}"}}}
		}), "spec.source.importFrom.store.namespaces[0].namespace"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestore(ns, fmt.Sprintf("case-%d", i), "", "bot", tc.mutate)
			err := k8sClient.Create(context.Background(), r)
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			NewWithT(t).Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	// What a typed client cannot send (its empty strings are left out): written as YAML
	// would write them.
	raw := []struct {
		name       string
		importFrom map[string]any
		want       string
	}{
		{"an empty thread id pattern", map[string]any{"kind": "LangGraphPostgres",
			"postgres": map[string]any{"uriSecret": map[string]any{"name": "lg-db", "key": "uri"}}, "user": map[string]any{"threadIdPattern": ""}},
			"spec.source.importFrom.user.threadIdPattern"},
		{"a user scope with no user", map[string]any{"kind": "LangGraphPostgres",
			"postgres": map[string]any{"uriSecret": map[string]any{"name": "lg-db", "key": "uri"}}, "user": map[string]any{"metadataKey": ""}},
			"importFrom.scopeTemplate uses {user}: set importFrom.user.metadataKey or importFrom.user.threadIdPattern"},
		{"a duration in days", map[string]any{"kind": "LangGraphPostgres",
			"postgres": map[string]any{"uriSecret": map[string]any{"name": "lg-db", "key": "uri"}}, "skipInactiveAfter": "7d"},
			`skipInactiveAfter is a positive duration such as "168h"`},
		{"sessions need no user", map[string]any{"kind": "LangGraphPostgres",
			"postgres": map[string]any{"uriSecret": map[string]any{"name": "lg-db", "key": "uri"}}, "user": map[string]any{"metadataKey": ""},
			"scopeTemplate": "session:{thread}"}, ""},
	}
	for i, tc := range raw {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "memory.amemory.io/v1alpha1", "kind": "MemoryRestore",
				"metadata": map[string]any{"namespace": ns, "name": fmt.Sprintf("raw-%d", i)},
				"spec":     map[string]any{"source": map[string]any{"importFrom": tc.importFrom}, "targetRef": map[string]any{"name": "bot"}},
			}}
			err := k8sClient.Create(context.Background(), u)
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			NewWithT(t).Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	// Defaults.
	r := newRestore(ns, "defaults", "", "bot", pg)
	create(t, r)
	g := NewWithT(t)
	imp := r.Spec.Source.ImportFrom
	g.Expect(imp.User.MetadataKey).To(Equal("user_id"))
	g.Expect(imp.User.ThreadIDPattern).To(BeEmpty())
	g.Expect(imp.ScopeTemplate).To(Equal("user:{user}"))
	g.Expect(imp.SkipZombies).To(Equal(ptr.To(true)))
	g.Expect(imp.SkipInactiveAfter).To(BeNil())
	g.Expect(r.Spec.ConflictPolicy).To(Equal(memoryv1alpha1.ConflictKeepNewer))
	err := updateRestore(r, func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.ImportFrom.ScopeTemplate = "session:{thread}" })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("a MemoryRestore is immutable; create a new one instead"))
}

// A thread id pattern that is not RE2, or has no group for the user, fails the import
// before anything else, with a reason that names it: Stalled, no Job.
func TestMemoryRestoreImportRefusesABadThreadIDPattern(t *testing.T) {
	ns := newNamespace(t)
	restore := importRestore(ns, "bad-pattern", "bot", memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres,
		Postgres: lgPostgres(""), User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-(?P<user>[^:]+`}})
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionStalled, metav1.ConditionTrue, memoryv1alpha1.ReasonInvalidThreadIDPattern)
	g := NewWithT(t)
	want := "importFrom.user.threadIdPattern \"^u-(?P<user>[^:]+\" is not an RE2 regular expression: error parsing regexp: missing closing ): `^u-(?P<user>[^:]+`"
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionStalled).Message).To(Equal(want))
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Reason).To(Equal(memoryv1alpha1.ReasonInvalidThreadIDPattern))
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionReconciling).Type).To(BeEmpty())
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(got.Status.Source).To(Equal("LangGraphPostgres secret/lg-db"))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	noGroup := importRestore(ns, "no-group", "bot", memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres,
		Postgres: lgPostgres(""), User: memoryv1alpha1.ImportUser{ThreadIDPattern: `^u-[0-9]+:`}})
	create(t, noGroup)
	got = waitRestoreCondition(t, client.ObjectKeyFromObject(noGroup), memoryv1alpha1.ConditionStalled, metav1.ConditionTrue, memoryv1alpha1.ReasonInvalidThreadIDPattern)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionStalled).Message).To(ContainSubstring(`"^u-[0-9]+:" has no group`))
	g.Eventually(func() []string { return eventReasons(ns, noGroup.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonInvalidThreadIDPattern))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())
}

// An import waits for its database's Secret, runs as a restore Job that writes its
// detail under the target store's prefix, and records the import's counts from the
// Job's termination message; a failed import says why, by reason, and is Stalled.
func TestMemoryRestoreImportRecordsTheJobSummary(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	restore := importRestore(ns, "from-langgraph", store.Name, memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres,
		Postgres: lgPostgres("langgraph"), User: memoryv1alpha1.ImportUser{ThreadIDPattern: lgThreadIDPattern},
		SkipInactiveAfter: &metav1.Duration{Duration: 168 * time.Hour}})
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSecretNotFound, "Secret "+ns+"/lg-db not found")
	g := NewWithT(t)
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	createSecret(t, ns, "lg-db", map[string]string{"uri": "postgres://lg:secret@langgraph-db:5432/lg"})
	job := waitForJob(t, restore)
	cfg, err := jobRestoreConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Import).To(Equal(&worker.ImportConfig{Kind: "LangGraphPostgres", Schema: "langgraph", UserMetadataKey: "user_id",
		UserPattern: lgThreadIDPattern, ScopeTemplate: "user:{user}", InactiveAfter: 168 * time.Hour, SkipZombies: true, Dir: "/tmp"}))
	g.Expect(cfg.Source).To(Equal(worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test"}))
	g.Expect(cfg.DetailKey).To(Equal(store.Status.ObjectStorage.Prefix + "imports/from-langgraph-" + string(restore.UID)[:8] + "/detail.jsonl.zst"))
	g.Expect(cfg.Unencrypted).To(BeFalse())
	g.Expect(envSecretRefs(job)).To(Equal(map[string][2]string{
		worker.EnvPostgresURI:       {"bot-memory-worker", "uri"},
		worker.EnvSourceS3AccessKey: {"s3-creds", "accessKeyID"},
		worker.EnvSourceS3SecretKey: {"s3-creds", "secretAccessKey"},
		worker.EnvImportPostgresURI: {"lg-db", "uri"},
	}))
	running := waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Expect(running.Status.Package).To(BeNil(), "an import reads no package")
	g.Expect(running.Status.Source).To(Equal("LangGraphPostgres secret/lg-db"))
	g.Expect(restoreCondition(running, memoryv1alpha1.ConditionProgressing).Message).To(Equal(
		"Job " + job.Name + " imports LangGraphPostgres secret/lg-db into MemoryStore bot"))

	stats := importer.Stats{Threads: 200, Imported: 124, Inactive: 38, Zombie: 36, NoUser: 1, Unsupported: 1, StoreItems: 60, StoreSkipped: 2,
		Items: 600, FirstProblem: "thread u-1001:sess-3: unsupported format: a pickled value (serializer type \"pickle\")"}
	summary := worker.RestoreSummary{ManifestSHA256: manifestSHA, FormatVersion: 1, PackageID: "import", Shards: 1, Embeddings: "Reembed",
		Read: 600, Restored: 600, RestoredByType: map[string]int64{"episodic": 542, "semantic": 58}, Scopes: 50, Vectors: 600,
		DetailKey: cfg.DetailKey, Import: &stats}
	msg, err := summary.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	completeJob(t, job)

	done := waitRestoreCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g.Expect(done.Status.Phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	g.Expect(restoreCondition(done, memoryv1alpha1.ConditionStalled).Type).To(BeEmpty())
	g.Expect(done.Status.Import).To(Equal(&memoryv1alpha1.ImportStatus{Threads: 200, Imported: 124, Inactive: 38, Zombie: 36, NoUser: 1,
		Unsupported: 1, StoreItems: 60, StoreSkipped: 2, Items: 600, FirstProblem: stats.FirstProblem}))
	g.Expect(done.Status.Restored).To(Equal(int64(600)))
	g.Expect(done.Status.Package).To(BeNil())
	g.Expect(done.Status.Detail).To(Equal(&memoryv1alpha1.ObjectLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Key: cfg.DetailKey}))
	g.Expect(restoreCondition(done, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		"Imported 600 memories in 50 scopes into MemoryStore bot from LangGraphPostgres secret/lg-db; " +
			"200 threads read (124 imported, 38 inactive, 36 zombie, 1 no user, 1 unsupported), 60 store items (2 left out); " +
			"600 vectors (Reembed); per-scope detail in s3://memory-test/" + cfg.DetailKey))

	// Imports that fail before writing anything: the reason says why, the message
	// carries the worker's error, and the restore is Stalled.
	for _, c := range []struct{ name, workerErr, reason string }{
		{"not-langgraph", `memory-operator restore: source database: langgraph postgres: no "langgraph"."checkpoint_migrations" table: ` +
			"this is not a langgraph-checkpoint-postgres database (or not its schema)", memoryv1alpha1.ReasonNotACheckpointer},
		{"unreachable", "memory-operator restore: source database: langgraph postgres: failed to connect to `user=lg database=lg`: " +
			"hostname resolving error: lookup langgraph-db: no such host", memoryv1alpha1.ReasonSourceUnreachable},
		{"too-new", "memory-operator restore: source database: unsupported format: langgraph-checkpoint-postgres schema version 12 " +
			"(this importer reads versions 4 to 9)", memoryv1alpha1.ReasonUnsupportedFormat},
	} {
		r := importRestore(ns, c.name, store.Name, memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportLangGraphPostgres, Postgres: lgPostgres("langgraph")})
		create(t, r)
		job := waitForJob(t, r)
		failedPod(t, job, c.workerErr)
		failJob(t, job, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
		got := waitRestoreCondition(t, client.ObjectKeyFromObject(r), memoryv1alpha1.ConditionStalled, metav1.ConditionTrue, c.reason)
		g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Reason).To(Equal(c.reason), c.name)
		g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal("Job "+job.Name+
			" failed (BackoffLimitExceeded): Job has reached the specified backoff limit; last error: "+c.workerErr), c.name)
		g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed), c.name)
		g.Expect(got.Status.Import).To(BeNil(), c.name)
	}
}

// The import sample is accepted as it is, and waits for its target store.
func TestMemoryRestoreImportSampleIsValid(t *testing.T) {
	sample := restoreSample(t, "memory_v1alpha1_memoryrestore_import.yaml")
	ns := newNamespace(t)
	sample.Namespace = ns
	create(t, sample)
	waitRestoreWaiting(t, client.ObjectKeyFromObject(sample), memoryv1alpha1.ReasonStoreNotFound,
		"MemoryStore acme not found in namespace "+ns+"; waiting for it")
}

// Imports driven end to end on real LangGraph data (written by LangGraph itself, see
// test/importers): the restore worker run in-process with the Job's own arguments and
// Secrets, its summary handed back as the pod's termination message, and the memories
// found in the target: every normal thread imported into its user's scope, the old
// and the zombie threads left out and counted, tool calls structured.
func TestMemoryRestoreImportEndToEndThroughTheWorker(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	f := services(t)
	ctx := context.Background()
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "lg-db", map[string]string{"uri": exp.DSN})
	sqliteStore := f.inlineStore(ns, "bot-sqlite", newTenant(), 8, false)
	create(t, sqliteStore)
	sqliteStore = waitReady(t, client.ObjectKeyFromObject(sqliteStore))
	sqliteKey := "imports-test/" + ns + "/checkpoints.sqlite"
	if _, err := minioClient(t, f).FPutObject(ctx, "memory-test", sqliteKey, exp.SQLitePath, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	rules := memoryv1alpha1.ImportSource{User: memoryv1alpha1.ImportUser{ThreadIDPattern: lgThreadIDPattern},
		SkipInactiveAfter: &metav1.Duration{Duration: 168 * time.Hour}}

	for _, tc := range []struct {
		name   string
		kind   memoryv1alpha1.ImportKind
		target *memoryv1alpha1.MemoryStore
	}{
		{"import-pg", memoryv1alpha1.ImportLangGraphPostgres, store},
		{"import-sqlite", memoryv1alpha1.ImportLangGraphSQLite, sqliteStore},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			imp := rules
			imp.Kind = tc.kind
			if tc.kind == memoryv1alpha1.ImportLangGraphPostgres {
				imp.Postgres = lgPostgres("")
			} else {
				imp.File = &memoryv1alpha1.ImportFile{Key: sqliteKey} // the target store's bucket, with its credentials
			}
			restore := importRestore(ns, tc.name, tc.target.Name, imp)
			create(t, restore)
			key := client.ObjectKeyFromObject(restore)
			job := waitForJob(t, restore)

			// The test plays the pod: the worker with the Job's arguments and Secrets, its
			// scratch space the test's (the pod's is /tmp).
			g := NewWithT(t)
			cfg, err := worker.ParseRestoreArgs(restoreJobArgs(t, job), io.Discard)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.Import.Dir).To(Equal("/tmp"))
			cfg.Import.Dir = t.TempDir()
			sum, err := worker.RunRestore(ctx, cfg, worker.RestoreSecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI,
				worker.EnvSourceS3AccessKey, worker.EnvSourceS3SecretKey, worker.EnvImportPostgresURI)), worker.RunOptions{Version: "test", Now: time.Now()})
			g.Expect(err).NotTo(HaveOccurred())
			msg, err := sum.TerminationMessage()
			g.Expect(err).NotTo(HaveOccurred())
			finishedPod(t, job, 0, string(msg))
			completeJob(t, job)

			got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
			normal := exp.ThreadsIn(importers.Normal)
			st := got.Status.Import
			g.Expect(st).NotTo(BeNil())
			g.Expect(st.Imported).To(Equal(int64(len(normal))))
			g.Expect(st.Threads).To(Equal(int64(len(exp.Threads))))
			// Every other thread is left out as old or zombie (an old zombie is one of the
			// two, as the importer decides).
			g.Expect(st.Inactive + st.Zombie).To(Equal(int64(len(exp.ThreadsIn(importers.Old, importers.ZombieError, importers.ZombieNoReply)))))
			g.Expect(st.Inactive).To(BeNumerically(">", 0))
			g.Expect(st.Zombie).To(BeNumerically(">", 0))
			s := sum.Import
			g.Expect(*st).To(Equal(memoryv1alpha1.ImportStatus{Threads: s.Threads, Imported: s.Imported, Inactive: s.Inactive, Zombie: s.Zombie,
				NoUser: s.NoUser, Empty: s.Empty, Unsupported: s.Unsupported, StoreItems: s.StoreItems, StoreSkipped: s.StoreSkipped,
				Items: s.Items, Messages: s.Messages, FirstProblem: s.FirstProblem}))
			g.Expect(st.Messages).To(BeNumerically(">", st.Imported), "the imported threads' messages are counted")
			g.Expect(st.Unsupported).To(BeZero())
			g.Expect(got.Status.Restored).To(Equal(st.Items))
			g.Expect(got.Status.Detail).NotTo(BeNil())
			_, err = minioClient(t, f).StatObject(ctx, got.Status.Detail.Bucket, got.Status.Detail.Key, minio.StatObjectOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "the detail object %s", got.Status.Detail.Key)

			// The target holds the memories: each normal thread's turns in its user's
			// scope, nothing of an old or zombie thread, tool calls as JSON.
			threads, toolCalls := map[string]string{}, 0
			var count int64
			g.Expect(storeOf(t, tc.target).Export(ctx, pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
				count++
				g.Expect(it.Source).To(HavePrefix("langgraph-checkpoint-"))
				if it.MemoryType != memory.Episodic {
					return nil
				}
				var c struct {
					ThreadID string `json:"thread_id"`
					Messages []struct {
						ToolCalls json.RawMessage `json:"tool_calls"`
					} `json:"messages"`
				}
				g.Expect(json.Unmarshal(it.Content, &c)).To(Succeed())
				threads[c.ThreadID] = it.Scope
				for _, m := range c.Messages {
					if m.ToolCalls != nil {
						g.Expect(string(m.ToolCalls)).To(HavePrefix("["), "tool calls stay structured")
						toolCalls++
					}
				}
				return nil
			})).To(Succeed())
			g.Expect(count).To(Equal(st.Items))
			want := map[string]string{}
			for _, th := range normal {
				g.Expect(th.UserID).NotTo(BeNil(), "thread %s", th.ThreadID)
				want[th.ThreadID] = "user:" + *th.UserID
			}
			g.Expect(threads).To(Equal(want))
			g.Expect(toolCalls).To(BeNumerically(">", 0))
		})
	}
}

// importThroughWorker uploads files (object key -> local path) to the test bucket,
// creates a MemoryRestore importing imp into target, runs the restore worker in-process
// with its Job's arguments and completes the Job: what a cluster does with it. It
// returns the Job's parsed configuration and the restore once Ready.
func importThroughWorker(t *testing.T, f backendFixture, target *memoryv1alpha1.MemoryStore, name string, imp memoryv1alpha1.ImportSource,
	files map[string]string) (worker.RestoreConfig, *memoryv1alpha1.MemoryRestore) {
	t.Helper()
	ctx := context.Background()
	for key, path := range files {
		if _, err := minioClient(t, f).FPutObject(ctx, "memory-test", key, path, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restore := importRestore(target.Namespace, name, target.Name, imp)
	create(t, restore)
	job := waitForJob(t, restore)
	g := NewWithT(t)
	cfg, err := worker.ParseRestoreArgs(restoreJobArgs(t, job), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	cfg.Import.Dir = t.TempDir()
	sum, err := worker.RunRestore(ctx, cfg, worker.RestoreSecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI,
		worker.EnvSourceS3AccessKey, worker.EnvSourceS3SecretKey)), worker.RunOptions{Version: "test", Now: time.Now()})
	g.Expect(err).NotTo(HaveOccurred())
	msg, err := sum.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	completeJob(t, job)
	return cfg, waitRestoreCondition(t, client.ObjectKeyFromObject(restore), memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
}

// A Mem0 import driven end to end on data mem0ai wrote (its Chroma database and history
// in the store's bucket): the restore worker run in-process with the Job's arguments,
// every live memory restored with its history, the deleted ones counted, never back.
func TestMemoryRestoreImportMem0ThroughTheWorker(t *testing.T) {
	exp := importers.GenerateMem0(t, importers.Mem0Options{})
	f := services(t)
	ctx := context.Background()
	target := readySnapshotStore(t, f, "mem0-target")
	ns := target.Namespace
	chromaKey, historyKey := "imports-test/"+ns+"/mem0/chroma.sqlite3", "imports-test/"+ns+"/mem0/history.db"
	cfg, got := importThroughWorker(t, f, target, "import-mem0", memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportMem0,
		File: &memoryv1alpha1.ImportFile{Key: chromaKey}, Mem0: &memoryv1alpha1.ImportMem0Options{HistoryKey: historyKey}},
		map[string]string{chromaKey: filepath.Join(exp.Dir, "chroma", "chroma.sqlite3"), historyKey: filepath.Join(exp.Dir, "history.db")})
	g := NewWithT(t)
	g.Expect(cfg.Import.Object).To(Equal(chromaKey))
	g.Expect(cfg.Import.HistoryObject).To(Equal(historyKey))
	st := got.Status.Import
	g.Expect(st).NotTo(BeNil())
	g.Expect(st.StoreItems).To(Equal(int64(len(exp.Memories))))
	g.Expect(st.LeftOut).To(Equal([]memoryv1alpha1.ImportLeftOut{{What: "mem0 memories deleted (their history ends in DELETE)", Count: int64(len(exp.Deleted))}}))
	g.Expect(got.Status.Restored).To(Equal(int64(len(exp.Memories))))
	withHistory := 0
	g.Expect(storeOf(t, target).Export(ctx, pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		g.Expect(it.Source).To(Equal("mem0"))
		g.Expect(slices.Contains(exp.Deleted, it.Key)).To(BeFalse(), "deleted memory %s back", it.Key)
		if len(it.History) > 0 {
			withHistory++
		}
		return nil
	})).To(Succeed())
	g.Expect(withHistory).To(Equal(len(exp.Updated)), "every updated memory keeps what it replaced")
}

// A CrewAI import driven end to end on the storage directory crews of crewai 1.9 wrote
// (its long-term database and chroma.sqlite3 in the store's bucket): every long-term,
// short-term and entity memory restored in the agents' and crews' scopes, with the
// types crewai's memories have, the knowledge collection counted as left out.
func TestMemoryRestoreImportCrewAIThroughTheWorker(t *testing.T) {
	exp := importers.GenerateCrewAI(t, 4, 2)
	f := services(t)
	ctx := context.Background()
	target := readySnapshotStore(t, f, "crewai-target")
	ltmKey, chromaKey := "imports-test/"+target.Namespace+"/crewai/long_term_memory_storage.db", "imports-test/"+target.Namespace+"/crewai/chroma.sqlite3"
	cfg, got := importThroughWorker(t, f, target, "import-crewai", memoryv1alpha1.ImportSource{Kind: memoryv1alpha1.ImportCrewAI,
		File: &memoryv1alpha1.ImportFile{Key: ltmKey}, CrewAI: &memoryv1alpha1.ImportCrewAIOptions{ChromaKey: chromaKey}},
		map[string]string{ltmKey: filepath.Join(exp.Dir, "long_term_memory_storage.db"), chromaKey: filepath.Join(exp.Dir, "chroma.sqlite3")})
	g := NewWithT(t)
	g.Expect(cfg.Import.ChromaObject).To(Equal(chromaKey))
	st := got.Status.Import
	g.Expect(st).NotTo(BeNil())
	g.Expect(st.LeftOut).To(Equal([]memoryv1alpha1.ImportLeftOut{{What: "crewai Chroma collection knowledge_travel_guide records (not memory: knowledge, or another store)",
		Count: int64(len(exp.Collections["knowledge_travel_guide"]))}}))
	types, scopes := map[memory.Type]int64{}, map[string]bool{}
	g.Expect(storeOf(t, target).Export(ctx, pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		g.Expect(it.Source).To(Equal("crewai"))
		types[it.MemoryType]++
		scopes[it.Scope] = true
		return nil
	})).To(Succeed())
	g.Expect(got.Status.Restored).To(Equal(st.StoreItems))
	g.Expect(types[memory.Procedural]).To(BeNumerically(">", 0))
	g.Expect(types[memory.Episodic]).To(BeNumerically(">", 0))
	g.Expect(types[memory.Semantic]).To(BeNumerically(">", 0))
	g.Expect(scopes).To(HaveKey("agent:旅行规划师"))
	g.Expect(scopes).To(HaveKey("agent:Researcher_Writer"))
}
