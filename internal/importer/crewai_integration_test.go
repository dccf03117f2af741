package importer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/test/importers"
)

// TestCrewAIMatchesCrewAI: what real crews (crewai 1.9, memory on) remembered imports,
// and nothing else: each agent's long-term rows of a task as one procedural memory
// in agent:<role> (the latest suggestions, the earlier runs its history); every
// short-term record as an episodic memory, and every entity as one semantic memory
// (latest description, earlier ones its history), in the crew's scope, found again
// for a Unicode role whose collection name crewai mangled; the knowledge collection
// counted as left out.
func TestCrewAIMatchesCrewAI(t *testing.T) {
	const runs = 2
	exp := importers.GenerateCrewAI(t, 4, runs)
	ctx := context.Background()
	src, err := OpenCrewAI(ctx, exp.Dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	got := map[[2]string]memory.Item{}
	st, err := ImportLangGraph(ctx, src, LangGraphOptions{Rules: Rules{Source: "crewai", Now: time.Now()}}, func(it memory.Item) error {
		if err := it.Validate(); err != nil {
			t.Fatalf("%s: %v", it.Key, err)
		}
		got[[2]string{it.Scope, it.Key}] = it
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.StoreSkipped != 0 || st.FirstProblem != "" {
		t.Fatalf("stats %+v", st)
	}

	// Long-term: one memory per agent and task.
	longTerm := 0
	for task, rows := range exp.LongTerm {
		byAgent := map[string]int{}
		latest := map[string]map[string]any{}
		for _, r := range rows { // newest first, as crewai loads them
			a := r.Metadata["agent"].(string)
			if byAgent[a] == 0 {
				latest[a] = r.Metadata
			}
			byAgent[a]++
		}
		for a, n := range byAgent {
			longTerm++
			it, ok := got[[2]string{"agent:" + crewAIScopeID(crewAISanitizeRole(a)), "task:" + shortHash(task)}]
			if !ok {
				t.Fatalf("long-term memory of %q for %q not imported", a, task)
			}
			var c map[string]any
			_ = json.Unmarshal(it.Content, &c)
			if it.MemoryType != memory.Procedural || c["task"] != task || !jsonEqual(t, c["suggestions"], latest[a]["suggestions"]) || len(it.History) != n-1 {
				t.Fatalf("long-term memory %s: %s, %d earlier; crewai's latest row %v of %d", it.Key, it.Content, len(it.History), latest[a], n)
			}
		}
	}
	if longTerm == 0 {
		t.Fatal("no long-term rows generated")
	}

	// The crews' scopes, from their roles as the generator made them.
	crewScope := map[string]string{"memory_short_term_Travel_Planner": "agent:Travel_Planner", "memory_short_term_____z": "agent:旅行规划师",
		"memory_short_term_Researcher_Writer": "agent:Researcher_Writer", "memory_short_term_Ops_Support_v2_1": "agent:Ops_Support_v2.1"}
	shortTerm, entities := 0, 0
	for name, recs := range exp.Collections {
		switch {
		case strings.HasPrefix(name, "memory_short_term"):
			scope := crewScope[name]
			for _, r := range recs {
				shortTerm++
				it, ok := got[[2]string{scope, r.ID}]
				if !ok {
					t.Fatalf("short-term record %s of %s not imported in %s", r.ID, name, scope)
				}
				var c map[string]any
				_ = json.Unmarshal(it.Content, &c)
				if it.MemoryType != memory.Episodic || c["text"] != r.Document || c["observation"] != r.Metadata["observation"] || c["agent"] == nil {
					t.Fatalf("short-term memory %s: %s; crewai holds %q %v", r.ID, it.Content, r.Document, r.Metadata)
				}
			}
		case strings.HasPrefix(name, "memory_entities"):
			scope := crewScope["memory_short_term"+strings.TrimPrefix(name, "memory_entities")]
			versions := map[string]int{}
			for _, r := range recs {
				head, _, _ := strings.Cut(r.Document, "): ")
				versions[head+")"]++
			}
			for key, n := range versions {
				entities++
				it, ok := got[[2]string{scope, "entity:" + key}]
				if !ok {
					t.Fatalf("entity %s of %s not imported in %s", key, name, scope)
				}
				var c map[string]any
				_ = json.Unmarshal(it.Content, &c)
				if it.MemoryType != memory.Semantic || len(it.History) != n-1 || (c["type"] == "city" && !strings.HasSuffix(c["description"].(string), "visit 2")) {
					t.Fatalf("entity %s: %s with %d earlier, crewai holds %d versions", key, it.Content, len(it.History), n)
				}
			}
		}
	}
	if shortTerm == 0 || entities == 0 || len(got) != longTerm+shortTerm+entities {
		t.Fatalf("imported %d memories; crewai holds %d long-term, %d short-term, %d entities", len(got), longTerm, shortTerm, entities)
	}
	if len(st.LeftOut) != 1 || st.LeftOut[0].Count != int64(len(exp.Collections["knowledge_travel_guide"])) ||
		!strings.Contains(st.LeftOut[0].What, "knowledge_travel_guide") {
		t.Fatalf("left out %+v, want the knowledge collection's records", st.LeftOut)
	}

	// The same files import the same memories: a directory or its two databases.
	again, err := OpenCrewAI(ctx, filepath.Join(exp.Dir, CrewAILongTermFile), filepath.Join(exp.Dir, "chroma.sqlite3"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	n := 0
	if _, err := ImportLangGraph(ctx, again, LangGraphOptions{Rules: Rules{Source: "crewai", Now: time.Now()}}, func(it memory.Item) error {
		if prev := got[[2]string{it.Scope, it.Key}]; prev.MemoryID != it.MemoryID || !prev.CreatedAt.Equal(it.CreatedAt) {
			t.Fatalf("second import of %s differs", it.Key)
		}
		n++
		return nil
	}); err != nil || n != len(got) {
		t.Fatalf("second import: %d memories, %v", n, err)
	}
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestCrewAIRefusesWhatItDoesNotRead: crewai 1.10+'s LanceDB memory, and files that
// are neither of its databases, get an error that says what they are.
func TestCrewAIRefusesWhatItDoesNotRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "memory", "memories.lance", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := OpenCrewAI(ctx, dir, "")
	if err == nil || !strings.Contains(err.Error(), "crewai 1.10+ unified memory in LanceDB") {
		t.Fatalf("LanceDB directory: %v", err)
	}
	_, err = OpenCrewAI(ctx, t.TempDir(), "")
	if err == nil || !strings.Contains(err.Error(), "holds neither long_term_memory_storage.db nor chroma.sqlite3") {
		t.Fatalf("empty directory: %v", err)
	}
	notDB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notDB, []byte("not a database, just text long enough to not be empty..."), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err = OpenCrewAI(ctx, notDB, ""); err == nil || !strings.Contains(err.Error(), "crewai: ") {
		t.Fatalf("a text file: %v", err)
	}
}
