package importer

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestCrewAILongTermRows: the rows of one agent and task fold into one procedural
// memory (the latest its content, the earlier its history, whatever order the ids
// say), a row whose metadata is not JSON is counted and named, never fatal, and a
// Unicode role with spaces and '/' makes a valid scope. The directory also holds a
// LanceDB table of an upgraded crewai: counted as not read.
func TestCrewAILongTermRows(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "memory", "memories.lance"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, CrewAILongTermFile)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE long_term_memories (id INTEGER PRIMARY KEY AUTOINCREMENT, task_description TEXT, metadata TEXT, datetime TEXT, score REAL)`,
		// Inserted out of time order: row 1 is the latest.
		`INSERT INTO long_term_memories (task_description, metadata, datetime, score) VALUES
			('plan the trip', '{"agent": "Travel Planner", "suggestions": ["third"], "quality": 9}', '1796419300.5', 9),
			('plan the trip', '{"agent": "Travel Planner", "suggestions": ["first"], "quality": 5}', '1796419100.25', 5),
			('plan the trip', '{"agent": "Travel Planner", "suggestions": ["second"], "quality": 7}', '1796419200', 7),
			('plan the trip', '{"agent": "Ops/Support 旅行", "suggestions": ["other agent"]}', '1796419200', 6),
			('broken', 'not json', '1796419200', 1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_ = db.Close()
	ctx := context.Background()
	src, err := OpenCrewAI(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	got := map[string]memory.Item{}
	st, err := ImportLangGraph(ctx, src, LangGraphOptions{Rules: Rules{Source: "crewai", Now: time.Now()}}, func(it memory.Item) error {
		if err := it.Validate(); err != nil {
			t.Fatal(err)
		}
		got[it.Scope] = it
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	planner, ok := got["agent:Travel_Planner"]
	if !ok || len(got) != 2 {
		t.Fatalf("memories %v", got)
	}
	if _, ok := got["agent:Ops_Support_旅行"]; !ok {
		t.Fatalf("the second agent's memory: %v", got)
	}
	if string(planner.Content) != `{"agent":"Travel Planner","crewai_row":1,"quality":9,"score":9,"suggestions":["third"],"task":"plan the trip"}` ||
		len(planner.History) != 2 || !planner.UpdatedAt.Equal(time.Unix(1796419300, 500_000_000).UTC()) ||
		!planner.CreatedAt.Equal(time.Unix(1796419100, 250_000_000).UTC()) {
		t.Fatalf("planner: %s, %d earlier, %s..%s", planner.Content, len(planner.History), planner.CreatedAt, planner.UpdatedAt)
	}
	if string(planner.History[0].Content) != `{"agent":"Travel Planner","crewai_row":2,"quality":5,"score":5,"suggestions":["first"],"task":"plan the trip"}` {
		t.Fatalf("oldest revision %s", planner.History[0].Content)
	}
	if len(st.LeftOut) != 2 || st.LeftOut[0].What != "crewai 1.10+ LanceDB memory tables (memories.lance), not read" ||
		st.LeftOut[1].Count != 1 || st.FirstProblem != "long-term row 5: metadata is not a JSON object" {
		t.Fatalf("left out %+v, problem %q", st.LeftOut, st.FirstProblem)
	}
}
