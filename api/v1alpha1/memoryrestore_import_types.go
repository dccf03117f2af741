package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImportKind is the framework an import reads.
// +kubebuilder:validation:Enum=LangGraphPostgres;LangGraphSQLite;LangChainPostgresHistory;LettaAgentFile;Mem0;LlamaIndexChatStore;AutoGenState;CrewAI
type ImportKind string

const (
	// ImportLangGraphPostgres reads a langgraph-checkpoint-postgres database: each
	// thread's latest root checkpoint and its messages, plus PostgresStore's store table.
	ImportLangGraphPostgres ImportKind = "LangGraphPostgres"
	// ImportLangGraphSQLite reads the same from a langgraph-checkpoint-sqlite file in
	// object storage.
	ImportLangGraphSQLite ImportKind = "LangGraphSQLite"
	// ImportLangChainPostgresHistory reads a langchain-postgres PostgresChatMessageHistory
	// table (postgres.table): each session is a thread.
	ImportLangChainPostgresHistory ImportKind = "LangChainPostgresHistory"
	// ImportLettaAgentFile reads a Letta agent file (.af) in object storage: each agent's
	// memory blocks and conversation.
	ImportLettaAgentFile ImportKind = "LettaAgentFile"
	// ImportMem0 reads mem0's local storage in object storage: its Chroma database
	// (file: the chroma.sqlite3 of its PersistentClient directory) and, optionally, its
	// history database (mem0.historyKey).
	ImportMem0 ImportKind = "Mem0"
	// ImportLlamaIndexChatStore reads a LlamaIndex chat store in object storage (file):
	// a persisted SimpleChatStore (JSON), a SQLiteChatStore's database, or the SQLite
	// database of a Memory's chat history; each key a thread.
	ImportLlamaIndexChatStore ImportKind = "LlamaIndexChatStore"
	// ImportAutoGenState reads a JSON file AutoGen saved, in object storage (file): a
	// team's or an agent's save_state() (one thread, named by the file), or a
	// ListMemory's dump_component().
	ImportAutoGenState ImportKind = "AutoGenState"
	// ImportCrewAI reads CrewAI's memory (crewai 0.x to 1.9) in object storage: its
	// long-term memory database (file: long_term_memory_storage.db) and, optionally, the
	// Chroma database of its short-term and entity memory (crewAI.chromaKey). crewai
	// 1.10+ keeps memory in LanceDB, which is not read.
	ImportCrewAI ImportKind = "CrewAI"
)

// ImportSource converts memory held by an agent framework into memories, then restores
// them like a package: mapping, denylist, tombstones, conflictPolicy, embeddings,
// dryRun and allowRepeat apply unchanged.
// +kubebuilder:validation:XValidation:rule="!(self.kind in ['LangGraphPostgres', 'LangChainPostgresHistory']) || has(self.postgres)",message="importFrom.kind LangGraphPostgres and LangChainPostgresHistory need importFrom.postgres (the Secret with the database's connection URI)"
// +kubebuilder:validation:XValidation:rule="!(self.kind in ['LangGraphSQLite', 'LettaAgentFile', 'Mem0', 'LlamaIndexChatStore', 'AutoGenState', 'CrewAI']) || has(self.file)",message="importFrom.kind LangGraphSQLite, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState and CrewAI need importFrom.file (the file's object)"
// +kubebuilder:validation:XValidation:rule="!has(self.postgres) || self.kind in ['LangGraphPostgres', 'LangChainPostgresHistory']",message="importFrom.postgres is only for kinds LangGraphPostgres and LangChainPostgresHistory"
// +kubebuilder:validation:XValidation:rule="!has(self.file) || self.kind in ['LangGraphSQLite', 'LettaAgentFile', 'Mem0', 'LlamaIndexChatStore', 'AutoGenState', 'CrewAI']",message="importFrom.file is only for kinds LangGraphSQLite, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState and CrewAI"
// +kubebuilder:validation:XValidation:rule="!has(self.mem0) || self.kind == 'Mem0'",message="importFrom.mem0 is only for kind Mem0"
// +kubebuilder:validation:XValidation:rule="!has(self.crewAI) || self.kind == 'CrewAI'",message="importFrom.crewAI is only for kind CrewAI"
// +kubebuilder:validation:XValidation:rule="self.kind != 'LangChainPostgresHistory' || (has(self.postgres) && has(self.postgres.table))",message="importFrom.kind LangChainPostgresHistory needs importFrom.postgres.table"
// +kubebuilder:validation:XValidation:rule="(has(self.scopeTemplate) && !self.scopeTemplate.contains('{user}')) || (has(self.user) && ((has(self.user.metadataKey) && self.user.metadataKey.size() > 0) || has(self.user.threadIdPattern)))",message="importFrom.scopeTemplate uses {user}: set importFrom.user.metadataKey or importFrom.user.threadIdPattern"
type ImportSource struct {
	// Kind of source: LangGraphPostgres, LangGraphSQLite, LangChainPostgresHistory,
	// LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState or CrewAI.
	Kind ImportKind `json:"kind"`

	// Postgres is the database of a LangGraphPostgres import.
	// +optional
	Postgres *ImportPostgres `json:"postgres,omitempty"`

	// File is the checkpointer file of a LangGraphSQLite import, in S3-compatible
	// storage.
	// +optional
	File *ImportFile `json:"file,omitempty"`

	// User says where a thread's user id comes from.
	// +kubebuilder:default={}
	// +optional
	User ImportUser `json:"user,omitempty"`

	// ScopeTemplate makes a thread's scope from {user} and {thread}: "user:{user}"
	// (default) puts every thread of a user in the user's scope, "session:{thread}"
	// gives each thread a session of its own. A thread whose user id is missing, or
	// makes no valid scope, is left out and counted as noUser.
	// +kubebuilder:default="user:{user}"
	// +kubebuilder:validation:Pattern=`^(user|session|agent):([\p{L}\p{N}\p{M}._@:/-]|\{user\}|\{thread\})+$`
	// +kubebuilder:validation:MaxLength=200
	// +optional
	ScopeTemplate string `json:"scopeTemplate,omitempty"`

	// SkipInactiveAfter leaves out threads whose last checkpoint is older than this
	// ("168h": a week), counted as inactive. Unset imports every thread.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="skipInactiveAfter is a positive duration such as \"168h\""
	// +optional
	SkipInactiveAfter *metav1.Duration `json:"skipInactiveAfter,omitempty"`

	// SkipZombies (default true) leaves out zombie threads, counted as zombie: the
	// agent never replied, or the last step ended in an error.
	// +kubebuilder:default=true
	// +optional
	SkipZombies *bool `json:"skipZombies,omitempty"`

	// KeepWorkingMemory also imports the raw messages of recent threads as working
	// memory of session:{thread}.
	// +optional
	KeepWorkingMemory *ImportWorkingMemory `json:"keepWorkingMemory,omitempty"`

	// Store says how LangGraph store items become semantic memories.
	// +optional
	Store *ImportStore `json:"store,omitempty"`

	// Mem0 says where the rest of a Mem0 import is.
	// +optional
	Mem0 *ImportMem0Options `json:"mem0,omitempty"`

	// CrewAI says where the rest of a CrewAI import is.
	// +optional
	CrewAI *ImportCrewAIOptions `json:"crewAI,omitempty"`

	// StateChannels turn state channels beyond messages (a LangGraph app's profile,
	// preferences, ...) into memories: each imported thread that holds the channel
	// gives one, keyed in the thread's scope, its value decoded from JsonPlus as
	// LangGraph's JSON reviver reads it. Of the threads of one scope, the most
	// recently active one's value is kept. Channels no rule names are counted in
	// status.import.leftOut.
	// +listType=map
	// +listMapKey=channel
	// +kubebuilder:validation:MaxItems=32
	// +optional
	StateChannels []ImportStateChannel `json:"stateChannels,omitempty"`
}

// ImportMem0Options locate a mem0 import's history and collection.
type ImportMem0Options struct {
	// HistoryKey is mem0's history database (history.db), an object in the bucket of
	// importFrom.file: each memory's earlier values become its history, and a memory
	// whose history ends in DELETE is never imported. Without it, the Chroma store's
	// live memories are imported with no history.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	HistoryKey string `json:"historyKey,omitempty"`
	// Collection is the Chroma collection mem0 keeps its memories in (mem0's
	// vector_store collection_name); default mem0.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]{1,62}$`
	// +optional
	Collection string `json:"collection,omitempty"`
}

// ImportCrewAIOptions are a CrewAI import's other file.
type ImportCrewAIOptions struct {
	// ChromaKey is the chroma.sqlite3 of CrewAI's storage directory, an object in the
	// bucket of importFrom.file: its short-term memory (episodic memories) and entity
	// memory (semantic memories keyed by entity), in each crew's scope. Without it, only
	// the long-term memory is imported.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ChromaKey string `json:"chromaKey,omitempty"`
}

// ImportStateChannel maps one state channel to a memory per imported thread.
type ImportStateChannel struct {
	// Channel is the state key, as the graph's state schema names it (not messages,
	// nor one of LangGraph's own channels, which start with "__" or hold a ':').
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`
	// +kubebuilder:validation:XValidation:rule="self != 'messages' && !self.startsWith('__')",message="stateChannels: messages and LangGraph's own channels are not state channels to map"
	Channel string `json:"channel"`
	// Type of the memory: semantic (default) or procedural.
	// +kubebuilder:validation:Enum=semantic;procedural
	// +kubebuilder:default=semantic
	// +optional
	Type string `json:"type,omitempty"`
	// Key of the memory in the thread's scope; default: the channel's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Key string `json:"key,omitempty"`
}

// ImportPostgres is a source database, reached with the connection URI in a Secret.
// +kubebuilder:validation:XValidation:rule="self.uriSecret.name.size() > 0",message="importFrom.postgres.uriSecret needs a name"
type ImportPostgres struct {
	// URISecret is a key of a Secret in the restore's namespace holding the source's
	// PostgreSQL connection URI (postgres://user:password@host:5432/db?sslmode=require).
	// It reaches the Job only by reference, never in its arguments. A role that can
	// read the checkpoint tables is enough: the import never writes to the source.
	URISecret corev1.SecretKeySelector `json:"uriSecret"`
	// Schema holds the LangGraph tables (or the chat history table); default: the
	// connection's search_path.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`
	// +optional
	Schema string `json:"schema,omitempty"`
	// Table is the PostgresChatMessageHistory table (LangChainPostgresHistory).
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`
	// +optional
	Table string `json:"table,omitempty"`
}

// ImportFile is one object in S3-compatible storage. Unset endpoint and bucket are the
// target store's object storage (as for a snapshot's destination); TLS and region
// follow the store's when the endpoint is the store's. Credentials are
// credentialsSecret, or, on the store's endpoint, an inline store's own; a store on a
// ClusterMemoryBackend has none to lend.
type ImportFile struct {
	// Endpoint as host[:port], without scheme.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	// +optional
	Bucket string `json:"bucket,omitempty"`
	// Key of the object (its full name in the bucket).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`
	// +optional
	Region string `json:"region,omitempty"`
	// Insecure uses plain HTTP instead of HTTPS.
	// +optional
	Insecure *bool `json:"insecure,omitempty"`
	// CredentialsSecret in the restore's namespace, with the access key and secret key.
	// The import also writes its per-scope detail next to the file with them.
	// +optional
	CredentialsSecret *ObjectStorageCredentials `json:"credentialsSecret,omitempty"`
	// Table is the chat store's table in a SQLite file (LlamaIndexChatStore), when it
	// is neither data_chatstore (a SQLiteChatStore's) nor llama_index_memory (a
	// Memory's).
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`
	// +optional
	Table string `json:"table,omitempty"`
}

// ImportUser says where a thread's user id comes from: the metadata key when the
// thread's latest checkpoint has it, else the pattern on the thread id.
type ImportUser struct {
	// MetadataKey is the checkpoint metadata key holding the user id (LangGraph copies
	// the run config's configurable values there). "" looks at the thread id only.
	// +kubebuilder:default=user_id
	// +kubebuilder:validation:MaxLength=256
	// +optional
	MetadataKey string `json:"metadataKey,omitempty"`
	// ThreadIDPattern is an RE2 regular expression on the thread id; its group named
	// "user", or else its first group, is the user id ("^u-(?P<user>[^:]+):"). The
	// operator checks it before starting the Job: a pattern that does not compile or
	// has no group fails the restore with reason InvalidThreadIdPattern.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ThreadIDPattern string `json:"threadIdPattern,omitempty"`
}

// ImportWorkingMemory keeps recent raw turns as working memory.
// +kubebuilder:validation:XValidation:rule="!has(self.window) || self.enabled",message="keepWorkingMemory.window needs keepWorkingMemory.enabled: true"
type ImportWorkingMemory struct {
	// Enabled imports every message of a kept thread, one working memory each, in the
	// thread's session (session:{thread}). With spec.types unset, working memory is
	// then restored too.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Window limits it to threads active within it ("24h"); unset: every kept thread.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="keepWorkingMemory.window is a positive duration such as \"24h\""
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
}

// ImportStore says what happens to LangGraph store items (PostgresStore's store table,
// SqliteStore's in the file).
// +kubebuilder:validation:XValidation:rule="!(has(self.skip) && self.skip) || !has(self.namespaces)",message="set store.skip or store.namespaces, not both"
type ImportStore struct {
	// Skip leaves the store out.
	// +optional
	Skip bool `json:"skip,omitempty"`
	// Namespaces map store namespaces to scopes, first match wins; an item no rule
	// matches is left out, counted as storeSkipped. Default: ("memories", "{user}", *)
	// to user:{user}, ("sessions", "{id}", *) to session:{id}, ("agents", "{id}", *)
	// to agent:{id}: the rules of the gateway's LangGraph Store API, so an item lands
	// where a LangGraph client of the gateway finds it.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Namespaces []StoreNamespaceRule `json:"namespaces,omitempty"`
}

// StoreNamespaceRule maps LangGraph store namespaces to a scope.
type StoreNamespaceRule struct {
	// Namespace is a pattern of labels: a literal label matches itself, "{name}"
	// captures one label, a final "*" matches any further labels (they go into the
	// memory's key).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	Namespace []string `json:"namespace"`
	// Scope is a template over the captures ("user:{user}"), using each exactly once.
	// +kubebuilder:validation:Pattern=`^(user|session|agent):([\p{L}\p{N}\p{M}._@:/-]|\{[a-z][a-z0-9_]*\})+$`
	// +kubebuilder:validation:MaxLength=256
	Scope string `json:"scope"`
}

// MaxImportLeftOut bounds ImportStatus.LeftOut.
const MaxImportLeftOut = 32

// ImportLeftOut is one kind of source data an import left out, and how much of it.
type ImportLeftOut struct {
	// What was left out, in words: "letta memory blocks attached to no agent".
	// +kubebuilder:validation:MaxLength=256
	What string `json:"what"`
	// Count of them.
	Count int64 `json:"count"`
}

// ImportStatus counts an import by source unit (a thread, a store item), as the
// worker reported them. threads = imported + inactive + zombie + noUser + empty +
// unsupported.
type ImportStatus struct {
	// Threads read from the source.
	// +optional
	Threads int64 `json:"threads,omitempty"`
	// Imported threads: converted into memories.
	// +optional
	Imported int64 `json:"imported,omitempty"`
	// Inactive threads, left out: idle longer than skipInactiveAfter.
	// +optional
	Inactive int64 `json:"inactive,omitempty"`
	// Zombie threads, left out: no agent reply, or ended in an error.
	// +optional
	Zombie int64 `json:"zombie,omitempty"`
	// NoUser threads, left out: the scope template needs a user id they do not have.
	// +optional
	NoUser int64 `json:"noUser,omitempty"`
	// Empty threads, left out: no messages.
	// +optional
	Empty int64 `json:"empty,omitempty"`
	// Unsupported threads, left out: a format the importer does not read (pickled
	// values, encrypted serializers, beta delta channels), never guessed at.
	// +optional
	Unsupported int64 `json:"unsupported,omitempty"`
	// StoreItems read from the source's store of facts (LangGraph's store, Letta's
	// memory blocks, mem0's memories, an AutoGen ListMemory), and StoreSkipped of them
	// left out (no namespace rule matched, or the value is not a JSON object).
	// +optional
	StoreItems int64 `json:"storeItems,omitempty"`
	// +optional
	StoreSkipped int64 `json:"storeSkipped,omitempty"`
	// Items is how many memories the conversion produced (what the restore then read).
	// +optional
	Items int64 `json:"items,omitempty"`
	// Messages counts the messages of the imported threads.
	// +optional
	Messages int64 `json:"messages,omitempty"`
	// LeftOut counts, by what it is, what the source holds that the import did not
	// convert and no count above covers (for example Letta memory blocks attached to
	// no agent): nothing is left out without a count.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	LeftOut []ImportLeftOut `json:"leftOut,omitempty"`
	// FirstProblem describes the first thread or store item left out or unsupported
	// (its id and why; never its content).
	// +optional
	FirstProblem string `json:"firstProblem,omitempty"`
}
