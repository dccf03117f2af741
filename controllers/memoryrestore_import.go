package controllers

import (
	"fmt"
	"regexp"
	"strings"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/worker"
)

// Imports: a MemoryRestore whose source is an agent framework's data
// (spec.source.importFrom). The restore Job converts it into a package in its scratch
// space and restores that like any other, so everything here only decides where the
// Job reads, where it writes its per-scope detail, and with which Secrets.

const (
	// importScratchDir is where an import Job converts its source: the worker Job's
	// /tmp emptyDir (the root filesystem is read-only). It holds the downloaded SQLite
	// file, the sort's spilled runs and the converted (compressed) package; size it with
	// spec.job.resources ephemeral-storage requests and limits.
	importScratchDir = "/tmp"
	// importsFolder holds the detail objects of imports under a store's prefix, or next
	// to an import's file.
	importsFolder = "imports/"
	// importDetailName is the detail object's name in its restore's folder, as the
	// worker names it for package restores.
	importDetailName = "detail.jsonl.zst"
)

// validateImport checks what admission cannot: the thread id pattern compiles as RE2
// and has a group for the user id, and the store's namespace rules are ones the
// importer accepts. A spec that fails is immutable, so the restore fails at once, with
// the field and the reason in the message.
func validateImport(imp *memoryv1alpha1.ImportSource) error {
	if p := imp.User.ThreadIDPattern; p != "" {
		re, err := regexp.Compile(p)
		if err != nil {
			return &runFailure{reason: memoryv1alpha1.ReasonInvalidThreadIDPattern, message: fmt.Sprintf(
				"importFrom.user.threadIdPattern %q is not an RE2 regular expression: %v", p, err)}
		}
		if re.NumSubexp() == 0 {
			return &runFailure{reason: memoryv1alpha1.ReasonInvalidThreadIDPattern, message: fmt.Sprintf(
				"importFrom.user.threadIdPattern %q has no group: the group named \"user\", or else the first group, is the user id (for instance ^u-(?P<user>[^:]+):)", p)}
		}
	}
	if s := imp.Store; s != nil && len(s.Namespaces) > 0 {
		if _, err := langgraphns.New(storeRules(s.Namespaces)); err != nil {
			return &runFailure{reason: memoryv1alpha1.ReasonInvalidStoreNamespaces, message: "importFrom.store.namespaces: " + err.Error()}
		}
	}
	return nil
}

func storeRules(rules []memoryv1alpha1.StoreNamespaceRule) []langgraphns.Rule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]langgraphns.Rule, len(rules))
	for i, r := range rules {
		out[i] = langgraphns.Rule{Namespace: r.Namespace, Scope: r.Scope}
	}
	return out
}

// planImport is the source plan of an import: where the Job reads its file and writes
// its per-scope detail, with the credentials for it. A LangGraphSQLite file's object
// storage is the file's (the target store's by default), and the detail goes next to
// the file; a LangGraphPostgres import reads no object, so its detail goes to the
// target store's object storage, under the store's prefix.
func planImport(restore *memoryv1alpha1.MemoryRestore, target *memoryv1alpha1.MemoryStore,
	storeObjects *memoryv1alpha1.ObjectStorageSpec) (restoreSourcePlan, error) {
	imp := restore.Spec.Source.ImportFrom
	folder := importsFolder + strings.TrimSuffix(runFolder(restore), "/") + "/" + importDetailName
	if f := imp.File; f != nil {
		dest, creds, err := planImportObjects(target, storeObjects, f, "importFrom.file")
		if err != nil {
			return restoreSourcePlan{}, err
		}
		dir := ""
		if i := strings.LastIndex(f.Key, "/"); i >= 0 {
			dir = f.Key[:i+1]
		}
		return restoreSourcePlan{Package: dest, Credentials: creds, ImportObject: f.Key, DetailKey: dir + folder}, nil
	}
	dest, creds, err := planImportObjects(target, storeObjects, nil,
		fmt.Sprintf("the per-scope detail of an import from %s", imp.Kind))
	if err != nil {
		return restoreSourcePlan{}, err
	}
	prefix := ""
	if own := target.Status.ObjectStorage; own != nil && own.Prefix != "" {
		prefix = strings.TrimSuffix(own.Prefix, "/") + "/"
	}
	return restoreSourcePlan{Package: dest, Credentials: creds, DetailKey: prefix + folder}, nil
}

// planImportObjects resolves an import's object storage as a snapshot's destination is
// resolved: unset endpoint and bucket are the target store's; TLS and region follow the
// store's object storage on its endpoint; credentials are the given Secret, or an
// inline store's own on its endpoint. f may be nil (the store's own storage); what names
// the field, or the purpose, in messages.
func planImportObjects(target *memoryv1alpha1.MemoryStore, storeObjects *memoryv1alpha1.ObjectStorageSpec,
	f *memoryv1alpha1.ImportFile, what string) (worker.Destination, memoryv1alpha1.ObjectStorageCredentials, error) {
	var none memoryv1alpha1.ObjectStorageCredentials
	o := memoryv1alpha1.ImportFile{}
	if f != nil {
		o = *f
	}
	var own memoryv1alpha1.ObjectStorageStatus
	if target.Status.ObjectStorage != nil {
		own = *target.Status.ObjectStorage
	}
	dest := worker.Destination{Endpoint: orDefault(o.Endpoint, own.Endpoint), Bucket: orDefault(o.Bucket, own.Bucket)}
	if dest.Endpoint == "" || dest.Bucket == "" {
		msg := fmt.Sprintf("MemoryStore %s has no object storage; set %s.endpoint, bucket and credentialsSecret", target.Name, what)
		if f == nil {
			msg = fmt.Sprintf("MemoryStore %s has no object storage, where %s goes; give the store object storage", target.Name, what)
		}
		return worker.Destination{}, none, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing, "%s", msg)
	}
	sameEndpoint := storeObjects != nil && dest.Endpoint == storeObjects.Endpoint
	if sameEndpoint {
		dest.Insecure, dest.Region = storeObjects.Insecure, storeObjects.Region
	}
	if o.Insecure != nil {
		dest.Insecure = *o.Insecure
	}
	if o.Region != "" {
		dest.Region = o.Region
	}
	var creds memoryv1alpha1.ObjectStorageCredentials
	switch {
	case o.CredentialsSecret != nil:
		creds = *o.CredentialsSecret
	case target.Spec.Backend.ClusterBackend != "":
		msg := fmt.Sprintf("MemoryStore %s uses ClusterMemoryBackend %s, whose object-storage credentials never leave the operator's namespace; "+
			"set %s.credentialsSecret to a Secret in namespace %s", target.Name, target.Spec.Backend.ClusterBackend, what, target.Namespace)
		if f == nil {
			msg = fmt.Sprintf("MemoryStore %s uses ClusterMemoryBackend %s, whose object-storage credentials never leave the operator's namespace, "+
				"and %s needs them; import into a store with inline object storage", target.Name, target.Spec.Backend.ClusterBackend, what)
		}
		return worker.Destination{}, none, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing, "%s", msg)
	case !sameEndpoint:
		return worker.Destination{}, none, stepErrorf(memoryv1alpha1.ReasonObjectStorageMissing,
			"%s.endpoint %s is not MemoryStore %s's object storage; set %s.credentialsSecret", what, dest.Endpoint, target.Name, what)
	default:
		creds = storeObjects.CredentialsSecret
	}
	creds.AccessKeyIDKey = orDefault(creds.AccessKeyIDKey, "accessKeyID")
	creds.SecretAccessKeyKey = orDefault(creds.SecretAccessKeyKey, "secretAccessKey")
	return dest, creds, nil
}

// importConfig is the worker's import configuration for the spec: the identity and
// selection rules as declared (the CRD applied the defaults), the file's key, and the
// Job's scratch space.
func importConfig(imp *memoryv1alpha1.ImportSource, object string) *worker.ImportConfig {
	ic := &worker.ImportConfig{
		Kind:            string(imp.Kind),
		Object:          object,
		UserMetadataKey: imp.User.MetadataKey,
		UserPattern:     imp.User.ThreadIDPattern,
		ScopeTemplate:   imp.ScopeTemplate,
		SkipZombies:     imp.SkipZombiesOrDefault(),
		Dir:             importScratchDir,
	}
	if p := imp.Postgres; p != nil {
		ic.Schema, ic.Table = p.Schema, p.Table
	}
	if f := imp.File; f != nil && f.Table != "" {
		ic.Table = f.Table
	}
	if d := imp.SkipInactiveAfter; d != nil {
		ic.InactiveAfter = d.Duration
	}
	if imp.KeepsWorkingMemory() {
		ic.KeepWorking = true
		if w := imp.KeepWorkingMemory.Window; w != nil {
			ic.WorkingWindow = w.Duration
		}
	}
	if s := imp.Store; s != nil {
		ic.SkipStore = s.Skip
		ic.Namespaces = storeRules(s.Namespaces)
	}
	if m := imp.Mem0; m != nil {
		ic.HistoryObject, ic.Collection = m.HistoryKey, m.Collection
	}
	if c := imp.CrewAI; c != nil {
		ic.ChromaObject = c.ChromaKey
	}
	for _, c := range imp.StateChannels {
		ic.StateChannels = append(ic.StateChannels, importer.StateChannel{Channel: c.Channel, Type: memory.Type(c.Type), Key: c.Key})
	}
	return ic
}

// importFailureReason names, from the worker's error, why an import failed before it
// wrote anything: the source could not be reached or read, is not a checkpointer, or is
// in a format the importer does not read. Anything else is Failed; the message always
// carries the worker's error.
func importFailureReason(workerErr string) string {
	e := strings.ToLower(workerErr)
	switch {
	case strings.Contains(e, "not a langgraph-checkpoint"), strings.Contains(e, "is not a readable sqlite database"):
		return memoryv1alpha1.ReasonNotACheckpointer
	case strings.Contains(e, strings.ToLower(importer.ErrUnsupported.Error())):
		return memoryv1alpha1.ReasonUnsupportedFormat
	case strings.Contains(e, "password authentication failed"), strings.Contains(e, "sqlstate 28p01"), strings.Contains(e, "sqlstate 28000"):
		return memoryv1alpha1.ReasonAuthenticationFailed
	case strings.Contains(e, "source database:"), strings.Contains(e, "no source database"), strings.Contains(e, "source file s3://"):
		return memoryv1alpha1.ReasonSourceUnreachable
	}
	return memoryv1alpha1.ReasonFailed
}

// recordImportStatus copies the import's counts from the worker's summary.
func recordImportStatus(restore *memoryv1alpha1.MemoryRestore, st *importer.Stats) {
	if st == nil {
		restore.Status.Import = nil
		return
	}
	restore.Status.Import = &memoryv1alpha1.ImportStatus{
		Threads: st.Threads, Imported: st.Imported, Inactive: st.Inactive, Zombie: st.Zombie, NoUser: st.NoUser,
		Empty: st.Empty, Unsupported: st.Unsupported, StoreItems: st.StoreItems, StoreSkipped: st.StoreSkipped,
		Items: st.Items, Messages: st.Messages, FirstProblem: st.FirstProblem,
	}
	for _, l := range st.LeftOut[:min(len(st.LeftOut), memoryv1alpha1.MaxImportLeftOut)] {
		restore.Status.Import.LeftOut = append(restore.Status.Import.LeftOut, memoryv1alpha1.ImportLeftOut{What: l.What, Count: l.Count})
	}
}

// importDetail tells what an import read, from its recorded counts: threads read and
// what became of them, and the store's items.
func importDetail(s memoryv1alpha1.ImportStatus) string {
	msg := fmt.Sprintf("%d threads read", s.Threads)
	var parts []string
	for _, c := range []struct {
		name string
		n    int64
	}{
		{"imported", s.Imported}, {"inactive", s.Inactive}, {"zombie", s.Zombie}, {"no user", s.NoUser},
		{"empty", s.Empty}, {"unsupported", s.Unsupported},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	if len(parts) > 0 {
		msg += " (" + strings.Join(parts, ", ") + ")"
	}
	if s.StoreItems > 0 {
		msg += fmt.Sprintf(", %d store items", s.StoreItems)
		if s.StoreSkipped > 0 {
			msg += fmt.Sprintf(" (%d left out)", s.StoreSkipped)
		}
	}
	for _, l := range s.LeftOut {
		msg += fmt.Sprintf("; left out: %d %s", l.Count, l.What)
	}
	return msg
}
