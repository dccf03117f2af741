package worker

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/importer"
	"github.com/amemory/memory-operator/internal/langgraphns"
)

// EnvImportPostgresURI is the import source's PostgreSQL connection URI (a LangGraph
// or LangChain database), from a Secret by reference.
const EnvImportPostgresURI = "MEMORY_IMPORT_PG_URI"

// Import kinds, as the MemoryRestore API spells them.
const (
	ImportLangGraphPostgres = "LangGraphPostgres"
	ImportLangGraphSQLite   = "LangGraphSQLite"
	// ImportLangChainPostgresHistory reads a langchain-postgres chat history table
	// (Table, in Schema) from the database in EnvImportPostgresURI.
	ImportLangChainPostgresHistory = "LangChainPostgresHistory"
	// ImportLettaAgentFile reads a Letta .af file (Object in Source.Bucket).
	ImportLettaAgentFile = "LettaAgentFile"
	// ImportMem0 reads mem0's Chroma database (Object: its chroma.sqlite3) and,
	// optionally, its history database (HistoryObject).
	ImportMem0 = "Mem0"
	// ImportLlamaIndexChatStore reads a LlamaIndex chat store (Object): a persisted
	// SimpleChatStore (JSON), a SQLiteChatStore or a Memory's SQLite history (Table
	// names the table when the file has another).
	ImportLlamaIndexChatStore = "LlamaIndexChatStore"
	// ImportAutoGenState reads a JSON file AutoGen saved (Object): a team's or an
	// agent's save_state(), or a ListMemory's dump_component().
	ImportAutoGenState = "AutoGenState"
	// ImportCrewAI reads CrewAI's (0.x to 1.9) long-term memory database (Object:
	// long_term_memory_storage.db, or chroma.sqlite3 alone) and, optionally, the Chroma
	// database of its short-term and entity memory beside it (ChromaObject).
	ImportCrewAI = "CrewAI"
)

var importKinds = []string{ImportLangGraphPostgres, ImportLangGraphSQLite, ImportLangChainPostgresHistory, ImportLettaAgentFile, ImportMem0,
	ImportLlamaIndexChatStore, ImportAutoGenState, ImportCrewAI}

// fileKinds are the import kinds whose source is a file in object storage.
var fileKinds = []string{ImportLangGraphSQLite, ImportLettaAgentFile, ImportMem0, ImportLlamaIndexChatStore, ImportAutoGenState, ImportCrewAI}

// ImportConfig makes a restore an import: instead of a package under Source.Prefix,
// the worker converts a framework's data into a package in ImportDir and restores
// that (so mapping, denylist, tombstones, conflicts, dry run and idempotency apply
// unchanged). Source still names the object storage the restore's detail object
// goes to, and (LangGraphSQLite) where the source file is.
type ImportConfig struct {
	Kind string
	// Schema holds the LangGraph tables (LangGraphPostgres; "" for the search_path).
	Schema string
	// Object is the source file's key in Source.Bucket (LangGraphSQLite, LettaAgentFile,
	// Mem0's chroma.sqlite3), HistoryObject mem0's history.db beside it (optional), and
	// ChromaObject CrewAI's chroma.sqlite3 beside its long-term database (optional).
	Object, HistoryObject, ChromaObject string
	// Collection is the Chroma collection mem0 keeps its memories in ("" for mem0's
	// default).
	Collection string
	// Table is the chat history table (LangChainPostgresHistory).
	Table string
	// Identity and selection (importer.Rules).
	UserMetadataKey string
	UserPattern     string
	ScopeTemplate   string
	InactiveAfter   time.Duration
	SkipZombies     bool
	KeepWorking     bool
	WorkingWindow   time.Duration
	SkipStore       bool
	Namespaces      []langgraphns.Rule
	// StateChannels map state channels beyond messages to memories
	// (importer.StateChannel).
	StateChannels []importer.StateChannel
	// Dir is local scratch space for the sort's runs of the converted memories (the
	// Job's emptyDir).
	Dir string
}

// args renders the import's flags.
func (ic *ImportConfig) args() []string {
	if ic == nil {
		return nil
	}
	args := []string{"--import-kind=" + ic.Kind}
	opt := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	opt("--import-schema", ic.Schema)
	opt("--import-object", ic.Object)
	opt("--import-history-object", ic.HistoryObject)
	opt("--import-chroma-object", ic.ChromaObject)
	opt("--import-collection", ic.Collection)
	opt("--import-table", ic.Table)
	opt("--import-user-metadata-key", ic.UserMetadataKey)
	opt("--import-user-pattern", ic.UserPattern)
	opt("--import-scope-template", ic.ScopeTemplate)
	if ic.InactiveAfter > 0 {
		args = append(args, "--import-inactive-after="+ic.InactiveAfter.String())
	}
	args = append(args, "--import-skip-zombies="+strconv.FormatBool(ic.SkipZombies))
	if ic.KeepWorking {
		args = append(args, "--import-keep-working")
	}
	if ic.WorkingWindow > 0 {
		args = append(args, "--import-working-window="+ic.WorkingWindow.String())
	}
	if ic.SkipStore {
		args = append(args, "--import-skip-store")
	}
	if len(ic.Namespaces) > 0 {
		b, _ := json.Marshal(ic.Namespaces) // plain strings: cannot fail
		args = append(args, "--import-namespaces="+string(b))
	}
	if len(ic.StateChannels) > 0 {
		b, _ := json.Marshal(ic.StateChannels) // plain strings: cannot fail
		args = append(args, "--import-state-channels="+string(b))
	}
	opt("--import-dir", ic.Dir)
	return args
}

// ImportFlags registers the conversion's flags, the same for the restore worker and
// memoryctl; finish builds the ImportConfig (nil when --import-kind is unset). Where a
// file kind's source file comes from is the caller's flag (the worker's
// --import-object, memoryctl's --file), and so is the check that it is given
// (NeedsFile).
func ImportFlags(fs *flag.FlagSet) (finish func() (*ImportConfig, error)) {
	var ic ImportConfig
	var namespaces, channels string
	fs.StringVar(&ic.Kind, "import-kind", "", "import from a framework instead of a package: "+strings.Join(importKinds, ", "))
	fs.StringVar(&ic.Schema, "import-schema", "", "schema of the LangGraph tables")
	fs.StringVar(&ic.Table, "import-table", "", "chat history table (LangChainPostgresHistory; LlamaIndexChatStore when not data_chatstore or llama_index_memory)")
	fs.StringVar(&ic.Collection, "import-collection", "", "the Chroma collection of mem0's memories (Mem0; default mem0)")
	fs.StringVar(&ic.UserMetadataKey, "import-user-metadata-key", "", "checkpoint metadata key holding the user id")
	fs.StringVar(&ic.UserPattern, "import-user-pattern", "", "regular expression on the thread id; group 'user' (or the first) is the user id")
	fs.StringVar(&ic.ScopeTemplate, "import-scope-template", "", "scope of a thread's memories, from {user} and {thread} (default user:{user})")
	fs.DurationVar(&ic.InactiveAfter, "import-inactive-after", 0, "leave out threads idle for longer")
	fs.BoolVar(&ic.SkipZombies, "import-skip-zombies", true, "leave out threads with no agent reply or ended in an error")
	fs.BoolVar(&ic.KeepWorking, "import-keep-working", false, "also import recent threads' raw messages as working memory")
	fs.DurationVar(&ic.WorkingWindow, "import-working-window", 0, "threads active within this window keep working memory")
	fs.BoolVar(&ic.SkipStore, "import-skip-store", false, "leave the LangGraph store out")
	fs.StringVar(&namespaces, "import-namespaces", "", "store namespace rules (JSON list of {namespace, scope})")
	fs.StringVar(&channels, "import-state-channels", "", `state channels beyond messages to import as memories (JSON list of {channel, type, key}, e.g. [{"channel":"profile","key":"profile"}])`)
	fs.StringVar(&ic.Dir, "import-dir", "", "scratch directory for the sorted, converted memories (default: the temp dir)")
	return func() (*ImportConfig, error) {
		if ic.Kind == "" {
			return nil, nil
		}
		for _, f := range []struct {
			flag, value string
			into        any
		}{{"--import-namespaces", namespaces, &ic.Namespaces}, {"--import-state-channels", channels, &ic.StateChannels}} {
			if f.value == "" {
				continue
			}
			dec := json.NewDecoder(strings.NewReader(f.value))
			dec.DisallowUnknownFields()
			if err := dec.Decode(f.into); err != nil {
				return nil, fmt.Errorf("%s: %w", f.flag, err)
			}
		}
		return &ic, ic.check()
	}
}

func (ic *ImportConfig) check() error {
	switch {
	case !slices.Contains(importKinds, ic.Kind):
		return fmt.Errorf("--import-kind %q is not one of %s", ic.Kind, strings.Join(importKinds, ", "))
	case ic.Kind == ImportLangChainPostgresHistory && ic.Table == "":
		return errors.New("--import-kind LangChainPostgresHistory needs --import-table")
	case ic.Kind == ImportMem0 && ic.Table != "":
		return errors.New("--import-table is for LangChainPostgresHistory; mem0's memories are in a Chroma collection (--import-collection)")
	case (ic.Kind == ImportMem0 || ic.Kind == ImportCrewAI) && ic.Table != "":
		return fmt.Errorf("--import-table is not for %s", ic.Kind)
	case ic.Kind == ImportMem0, ic.Kind == ImportCrewAI:
		// mem0 names each memory's user, agent or run itself, CrewAI its agents: the
		// scopes come from the source, not from a thread's scope template.
	case ic.UserMetadataKey == "" && ic.UserPattern == "" && strings.Contains(ic.scopeTemplate(), "{user}") && ic.Kind == ImportLettaAgentFile:
		return errors.New("a Letta agent file names agents, not users: set --import-scope-template='agent:{thread}' (each agent's memory in its own scope), or --import-user-pattern to read a user from the agent's name")
	case ic.UserMetadataKey == "" && ic.UserPattern == "" && strings.Contains(ic.scopeTemplate(), "{user}"):
		return errors.New("the scope template needs a user: set --import-user-metadata-key or --import-user-pattern")
	}
	if ic.UserPattern != "" {
		if _, err := regexp.Compile(ic.UserPattern); err != nil {
			return fmt.Errorf("--import-user-pattern: %w", err)
		}
	}
	if _, err := langgraphns.New(ic.Namespaces); err != nil {
		return fmt.Errorf("--import-namespaces: %w", err)
	}
	if err := importer.ValidateStateChannels(ic.StateChannels); err != nil {
		return fmt.Errorf("--import-state-channels: %w", err)
	}
	return nil
}

// NeedsFile reports whether the import reads a file (LangGraphSQLite,
// LettaAgentFile) rather than a database.
func (ic *ImportConfig) NeedsFile() bool { return slices.Contains(fileKinds, ic.Kind) }

func (ic *ImportConfig) scopeTemplate() string {
	if ic.ScopeTemplate == "" {
		return "user:{user}"
	}
	return ic.ScopeTemplate
}

// ImportKinds are the import kinds, as the MemoryRestore API spells them.
func ImportKinds() []string { return slices.Clone(importKinds) }
