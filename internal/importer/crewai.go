package importer

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/amemory/memory-operator/internal/memory"
)

// CrewAI reads the memory CrewAI keeps in its storage directory (CREWAI_STORAGE_DIR)
// when a crew runs with memory=True: the "legacy" memory of crewai 0.x to 1.9.
//
//   - long_term_memory_storage.db, table long_term_memories: one row per task an agent
//     completed (task_description; metadata: agent, expected_output, the evaluator's
//     suggestions and quality; datetime, a Unix time; score). The rows of one agent and
//     task become one procedural memory in agent:<role>: the latest row's suggestions,
//     the earlier rows its history.
//   - chroma.sqlite3: short-term memory (collections memory_short_term[_<roles>]: each
//     agent's final answer, with the task as observation) becomes episodic memories,
//     and entity memory (memory_entities[_<roles>]: "name(type): description", with
//     relationships) semantic memories keyed by name and type, the latest description
//     kept and the earlier ones its history; both in the crew's scope,
//     agent:<roles>. The vectors are not read: the restore embeds.
//
// CrewAI has no user: scopes are its agents (a role as crewai sanitises it for names,
// spaces and '/' made '_'). A collection's name is the crew's roles made safe for
// Chroma, which loses non-ASCII roles ("旅行规划师" becomes "____z"); the roles are found
// again through the long-term rows of the tasks its short-term memories observed.
// Collections that are not memory (a crew's knowledge) are counted in Stats.LeftOut.
//
// crewai 1.10 and later keep one "unified" memory in LanceDB (memory/memories.lance),
// which the importer does not read; such a directory is refused naming the version.
type CrewAI struct {
	ltm     *sql.DB
	ltmPath string
	chroma  *chromaDB
	tasks   map[string]string // task description -> the agent role of its latest long-term row
	left    []LeftOut
	problem string // the first row that could not be read
}

// CrewAI's file names in its storage directory.
const (
	CrewAILongTermFile = "long_term_memory_storage.db"
	crewAIChromaFile   = "chroma.sqlite3"
)

// OpenCrewAI opens CrewAI's storage directory, or one of its databases
// (long_term_memory_storage.db or chroma.sqlite3, told apart by their tables), and
// chromaPath, the Chroma database beside a long-term one, when not empty.
func OpenCrewAI(ctx context.Context, path, chromaPath string) (*CrewAI, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("crewai: %w", err)
	}
	var ltmPath string
	if st.IsDir() {
		if p := filepath.Join(path, CrewAILongTermFile); fileExists(p) {
			ltmPath = p
		}
		if p := filepath.Join(path, crewAIChromaFile); fileExists(p) && chromaPath == "" {
			chromaPath = p
		}
		if ltmPath == "" && chromaPath == "" {
			if lance := findLance(path); lance != "" {
				return nil, fmt.Errorf("crewai: %s holds crewai 1.10+ unified memory in LanceDB (%s), which the importer does not read; "+
					"it reads the memory of crewai 0.x to 1.9 (%s and %s)", path, lance, CrewAILongTermFile, crewAIChromaFile)
			}
			return nil, fmt.Errorf("crewai: %s holds neither %s nor %s (CrewAI's storage directory, CREWAI_STORAGE_DIR)", path,
				CrewAILongTermFile, crewAIChromaFile)
		}
	} else {
		ltmPath = path
	}
	c := &CrewAI{tasks: map[string]string{}}
	if st.IsDir() {
		// A directory crewai 1.10+ also wrote to (an upgrade keeps the old files): what
		// its LanceDB holds is not read, and says so.
		if lance := findLance(path); lance != "" {
			c.left = append(c.left, LeftOut{What: "crewai 1.10+ LanceDB memory tables (" + filepath.Base(lance) + "), not read", Count: 1})
		}
	}
	if ltmPath != "" {
		if c.ltm, err = openSQLiteRO(ltmPath); err != nil {
			return nil, fmt.Errorf("crewai: %w", err)
		}
		c.ltmPath = ltmPath
		var has int
		if err := c.ltm.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'long_term_memories'`).Scan(&has); err != nil {
			_ = c.Close()
			if strings.HasSuffix(ltmPath, ".lance") || findLance(filepath.Dir(ltmPath)) != "" {
				return nil, fmt.Errorf("crewai: %s is crewai 1.10+ unified memory (LanceDB), which the importer does not read; "+
					"it reads the memory of crewai 0.x to 1.9 (%s and %s)", ltmPath, CrewAILongTermFile, crewAIChromaFile)
			}
			return nil, fmt.Errorf("crewai: %s is not a SQLite database: %w", ltmPath, err)
		}
		if has == 0 {
			// The one file given may be the Chroma database.
			_ = c.ltm.Close()
			c.ltm, c.ltmPath = nil, ""
			if chromaPath != "" || !st.Mode().IsRegular() {
				return nil, fmt.Errorf("crewai: %s has no long_term_memories table (crewai's %s)", ltmPath, CrewAILongTermFile)
			}
			chromaPath = ltmPath
		}
	}
	if chromaPath != "" {
		ch, err := openChroma(ctx, chromaPath)
		if errors.As(err, new(errNotChroma)) {
			_ = c.Close()
			return nil, fmt.Errorf("crewai: %s is neither crewai's %s (no long_term_memories table) nor a Chroma database (%s)",
				chromaPath, CrewAILongTermFile, crewAIChromaFile)
		}
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("crewai: %w", err)
		}
		c.chroma = ch
	}
	return c, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// findLance finds a LanceDB table (a directory named *.lance) in dir or its memory/
// subdirectory, where crewai 1.10+ keeps memories.lance.
func findLance(dir string) string {
	for _, d := range []string{dir, filepath.Join(dir, "memory")} {
		if m, _ := filepath.Glob(filepath.Join(d, "*.lance")); len(m) > 0 {
			return m[0]
		}
	}
	return ""
}

// Close closes the databases.
func (c *CrewAI) Close() error {
	var err error
	if c.ltm != nil {
		err = c.ltm.Close()
	}
	if c.chroma != nil {
		err = errors.Join(err, c.chroma.Close())
	}
	return err
}

// Threads yields nothing: CrewAI's legacy memory holds no conversations.
func (c *CrewAI) Threads(context.Context, func(Thread) error) error { return nil }

// crewAILongTerm is one long_term_memories row.
type crewAILongTerm struct {
	task    string
	at      time.Time
	score   sql.NullFloat64
	agent   string
	rowID   int64
	content json.RawMessage
}

// StoreItems yields the long-term memories (one per agent and task), then each memory
// collection's records, collection by collection in name order.
func (c *CrewAI) StoreItems(ctx context.Context, fn func(StoreItem) error) error {
	if c.ltm != nil {
		if err := c.longTerm(ctx, fn); err != nil {
			return err
		}
	}
	if c.chroma == nil {
		return nil
	}
	names, err := c.chroma.collections(ctx)
	if err != nil {
		return fmt.Errorf("crewai: %w", err)
	}
	crews := map[string]string{} // collection suffix -> crew scope id
	for _, name := range names {
		if suffix, ok := strings.CutPrefix(name, "memory_short_term"); ok {
			if err := c.shortTerm(ctx, name, strings.TrimPrefix(suffix, "_"), crews, fn); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		switch {
		case strings.HasPrefix(name, "memory_short_term"):
		case strings.HasPrefix(name, "memory_entities"):
			suffix := strings.TrimPrefix(strings.TrimPrefix(name, "memory_entities"), "_")
			if err := c.entities(ctx, name, cmp.Or(crews[suffix], crewAIScopeID(suffix)), fn); err != nil {
				return err
			}
		default:
			seg, err := c.chroma.metadataSegment(ctx, name)
			if err != nil {
				return fmt.Errorf("crewai: %w", err)
			}
			n, _ := c.chroma.count(ctx, seg)
			c.left = append(c.left, LeftOut{What: "crewai Chroma collection " + shown(name) + " records (not memory: knowledge, or another store)", Count: n})
		}
	}
	return nil
}

// longTerm groups the long-term rows by agent and task, the latest row the memory and
// the earlier ones its history. SQLite sorts the rows by group, so that one group at a
// time is in memory however many rows the table holds.
func (c *CrewAI) longTerm(ctx context.Context, fn func(StoreItem) error) error {
	rows, err := c.ltm.QueryContext(ctx, `SELECT id, coalesce(task_description, ''), coalesce(metadata, ''), coalesce(CAST(datetime AS TEXT), ''), score,
		CASE WHEN json_valid(metadata) AND json_type(metadata, '$.agent') = 'text' THEN json_extract(metadata, '$.agent') ELSE '' END AS agent
		FROM long_term_memories ORDER BY agent, coalesce(task_description, ''), id`)
	if err != nil {
		return fmt.Errorf("crewai: reading %s: %w", c.ltmPath, err)
	}
	defer rows.Close()
	var group []crewAILongTerm
	emit := func() error {
		if len(group) == 0 {
			return nil
		}
		g := group
		group = group[:0]
		slices.SortStableFunc(g, func(a, b crewAILongTerm) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.rowID, b.rowID)) })
		last := g[len(g)-1]
		si := StoreItem{Scope: "agent:" + crewAIScopeID(crewAISanitizeRole(last.agent)), Type: memory.Procedural, Key: "task:" + shortHash(last.task),
			Value: last.content, CreatedAt: g[0].at, UpdatedAt: last.at, Namespace: []string{"crewai", "long_term"}}
		for i, r := range g[:len(g)-1] {
			si.History = append(si.History, memory.Revision{Content: r.content, Source: "crewai", BaseScore: 0.5,
				UpdatedAt: r.at, SupersededAt: g[i+1].at})
		}
		return fn(si)
	}
	for rows.Next() {
		var (
			r                    crewAILongTerm
			metaText, dateString string
			meta                 map[string]any
		)
		if err := rows.Scan(&r.rowID, &r.task, &metaText, &dateString, &r.score, &r.agent); err != nil {
			return fmt.Errorf("crewai: reading %s: %w", c.ltmPath, err)
		}
		if err := json.Unmarshal([]byte(metaText), &meta); err != nil || meta == nil {
			if c.problem == "" {
				c.problem = fmt.Sprintf("long-term row %d: metadata is not a JSON object", r.rowID)
			}
			c.countLeftOut("crewai long-term rows whose metadata is not a JSON object")
			continue
		}
		if len(group) > 0 && (group[0].agent != r.agent || group[0].task != r.task) {
			if err := emit(); err != nil {
				return err
			}
		}
		r.at = crewAITime(dateString)
		content := map[string]any{"task": r.task, "agent": r.agent, "crewai_row": r.rowID}
		for _, k := range []string{"suggestions", "quality", "expected_output"} {
			if v, ok := meta[k]; ok {
				content[k] = v
			}
		}
		if r.score.Valid && !math.IsNaN(r.score.Float64) && !math.IsInf(r.score.Float64, 0) {
			content["score"] = r.score.Float64
		}
		if r.content, err = json.Marshal(content); err != nil {
			return fmt.Errorf("crewai: long-term row %d: %w", r.rowID, err)
		}
		group = append(group, r)
		c.tasks[r.task] = r.agent
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("crewai: reading %s: %w", c.ltmPath, err)
	}
	return emit()
}

// crewAITime reads long_term_memories.datetime: str(time.time()), a Unix time.
func crewAITime(s string) time.Time {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e11 {
		t, _ := mem0Time(s) // an ISO time, should a version write one; else zero: dated at import
		return t
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC().Truncate(time.Microsecond)
}

// shortHash names a long text in a key.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

// shortTerm yields a short-term collection's records as episodic memories in the
// crew's scope, which it records in crews for the entity collection of the same crew.
func (c *CrewAI) shortTerm(ctx context.Context, name, suffix string, crews map[string]string, fn func(StoreItem) error) error {
	seg, err := c.chroma.metadataSegment(ctx, name)
	if err != nil {
		return fmt.Errorf("crewai: %w", err)
	}
	var items []StoreItem
	firstRow := map[string]int64{} // the agents of the tasks observed, and when each was first stored
	err = c.chroma.records(ctx, seg, func(r chromaRecord) error {
		observation, _ := r.Meta["observation"].(string)
		content := map[string]any{"text": r.document(), "crewai_id": r.ID}
		if observation != "" {
			content["observation"] = observation
		}
		if agent, ok := c.tasks[observation]; ok && observation != "" {
			content["agent"] = agent
			if first, seen := firstRow[agent]; !seen || r.Row < first {
				firstRow[agent] = r.Row
			}
		}
		if extra := otherMeta(r.Meta, "observation"); len(extra) > 0 {
			content["metadata"] = extra
		}
		raw, err := json.Marshal(content)
		if err != nil {
			return err
		}
		items = append(items, StoreItem{Type: memory.Episodic, Key: r.ID, Value: raw, CreatedAt: r.CreatedAt, UpdatedAt: r.CreatedAt,
			Namespace: []string{"crewai", name}})
		return nil
	})
	if err != nil {
		return fmt.Errorf("crewai: reading %s: %w", name, err)
	}
	crew := crewAIScopeID(suffix)
	// Roles in the order their first memory was stored: the crew's agent order, as
	// crewai named the collection; the name confirms them.
	roles := slices.SortedFunc(maps.Keys(firstRow), func(a, b string) int { return cmp.Compare(firstRow[a], firstRow[b]) })
	ordered := make([]string, len(roles))
	for i, role := range roles {
		ordered[i] = crewAISanitizeRole(role)
	}
	if len(ordered) > 0 && crewAICollectionName("memory_short_term_"+strings.Join(ordered, "_")) == name {
		crew = crewAIScopeID(strings.Join(ordered, "_"))
	}
	crews[suffix] = crew
	for _, si := range items {
		si.Scope = "agent:" + crew
		if err := fn(si); err != nil {
			return err
		}
	}
	return nil
}

// entities yields an entity collection's records as semantic memories keyed by the
// entity's name and type: the latest description the memory, earlier ones its history.
func (c *CrewAI) entities(ctx context.Context, name, crew string, fn func(StoreItem) error) error {
	seg, err := c.chroma.metadataSegment(ctx, name)
	if err != nil {
		return fmt.Errorf("crewai: %w", err)
	}
	type version struct {
		at      time.Time
		row     int64
		content json.RawMessage
	}
	byKey := map[string][]version{}
	err = c.chroma.records(ctx, seg, func(r chromaRecord) error {
		doc := r.document()
		content := map[string]any{"text": doc, "crewai_id": r.ID}
		key := doc
		// "name(type): description", as EntityMemory writes it.
		if head, desc, ok := strings.Cut(doc, "): "); ok {
			if i := strings.LastIndex(head, "("); i > 0 {
				content["name"], content["type"], content["description"] = head[:i], head[i+1:], desc
				key = head + ")"
			}
		}
		if rel, ok := r.Meta["relationships"].(string); ok && rel != "" {
			content["relationships"] = rel
		}
		if extra := otherMeta(r.Meta, "relationships"); len(extra) > 0 {
			content["metadata"] = extra
		}
		raw, err := json.Marshal(content)
		if err != nil {
			return err
		}
		byKey[key] = append(byKey[key], version{r.CreatedAt, r.Row, raw})
		return nil
	})
	if err != nil {
		return fmt.Errorf("crewai: reading %s: %w", name, err)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		vs := byKey[key]
		slices.SortFunc(vs, func(a, b version) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.row, b.row)) })
		last := vs[len(vs)-1]
		k := "entity:" + strings.TrimSpace(key)
		if len(k) > memory.MaxKeyLen {
			k = "entity:" + shortHash(key)
		}
		si := StoreItem{Scope: "agent:" + crew, Type: memory.Semantic, Key: k, Value: last.content, CreatedAt: vs[0].at, UpdatedAt: last.at,
			Namespace: []string{"crewai", name}}
		for i, v := range vs[:len(vs)-1] {
			si.History = append(si.History, memory.Revision{Content: v.content, Source: "crewai", BaseScore: 0.5, UpdatedAt: v.at, SupersededAt: vs[i+1].at})
		}
		if err := fn(si); err != nil {
			return err
		}
	}
	return nil
}

// otherMeta is a record's metadata beyond its text and the key its kind reads.
func otherMeta(meta map[string]any, known string) map[string]any {
	out := map[string]any{}
	for k, v := range meta {
		if k != known && k != "chroma:document" && k != "#document" && v != nil {
			out[k] = v
		}
	}
	return out
}

// crewAISanitizeRole is crewai's own RAGStorage._sanitize_role.
func crewAISanitizeRole(role string) string {
	return strings.NewReplacer("\n", "", " ", "_", "/", "_").Replace(role)
}

// crewAICollectionName is crewai's _sanitize_collection_name: what Chroma accepts.
func crewAICollectionName(name string) string {
	b := []byte{}
	for _, r := range name {
		if r < unicode.MaxASCII && (r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	alnum := func(c byte) bool { return c != '_' && c != '-' }
	if len(b) == 0 {
		return "default_collection"
	}
	if !alnum(b[0]) {
		b = append([]byte{'a'}, b...)
	}
	if !alnum(b[len(b)-1]) {
		b[len(b)-1] = 'z'
	}
	for len(b) < 3 {
		b = append(b, 'x')
	}
	if len(b) > 63 {
		b = b[:63]
		if !alnum(b[62]) {
			b[62] = 'z'
		}
	}
	return string(b)
}

// crewAIScopeID makes a role (or a crew's roles) a scope id: what scopes do not allow
// becomes '_', and an empty one "crew".
func crewAIScopeID(s string) string {
	b := strings.Builder{}
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || strings.ContainsRune("-_.@:/", r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "crew"
	}
	id := []rune(b.String())
	if len(string(id)) <= memory.MaxScopeIDLen {
		return string(id)
	}
	for len(string(id)) > memory.MaxScopeIDLen-17 {
		id = id[:len(id)-1]
	}
	return string(id) + "-" + shortHash(s)
}

func (c *CrewAI) countLeftOut(what string) {
	for i := range c.left {
		if c.left[i].What == what {
			c.left[i].Count++
			return
		}
	}
	c.left = append(c.left, LeftOut{What: what, Count: 1})
}

// leftOut counts what the files hold that is not memory (leftOutReporter).
func (c *CrewAI) leftOut() ([]LeftOut, string) {
	return c.left, c.problem
}
