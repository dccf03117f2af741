package memory

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func validItem() Item {
	return Item{
		MemoryID:   "01hx-test",
		MemoryType: Semantic,
		Scope:      "user:1024",
		Key:        "preference.coffee",
		Content:    json.RawMessage(`{"drink":"flat white","milk":"oat"}`),
		Source:     "langgraph@0.2",
		BaseScore:  0.9,
		CreatedAt:  t0,
		UpdatedAt:  t0.Add(time.Hour),
	}
}

func TestItemValidate(t *testing.T) {
	zero := time.Time{}
	later := t0.Add(48 * time.Hour)
	tests := []struct {
		name      string
		mut       func(*Item)
		wantField string
		wantErr   string
	}{
		{name: "valid", mut: func(*Item) {}},
		{name: "valid without key", mut: func(it *Item) { it.Key = "" }},
		{name: "valid with expiry, archive, history, embedding", mut: func(it *Item) {
			it.ExpiresAt, it.ArchivedAt = &later, &later
			it.History = []Revision{{Content: json.RawMessage(`{"drink":"espresso"}`), UpdatedAt: t0, SupersededAt: t0.Add(time.Hour)}}
			it.Embedding = []float32{0.1, -0.2}
		}},
		{name: "valid zero score", mut: func(it *Item) { it.BaseScore = 0 }},
		{name: "valid empty object", mut: func(it *Item) { it.Content = json.RawMessage(` { } `) }},
		{name: "valid updated equals created", mut: func(it *Item) { it.UpdatedAt = it.CreatedAt }},

		{name: "no id", mut: func(it *Item) { it.MemoryID = "" }, wantField: "memory_id", wantErr: "memory_id: is empty"},
		{name: "id with quote", mut: func(it *Item) { it.MemoryID = `a"b` }, wantField: "memory_id",
			wantErr: `memory_id: has a disallowed character '"' at offset 1 (allowed: letters, digits and -_.@:)`},
		{name: "id too long", mut: func(it *Item) { it.MemoryID = strings.Repeat("x", 129) }, wantField: "memory_id",
			wantErr: "memory_id: is 129 characters long (at most 128)"},
		{name: "no type", mut: func(it *Item) { it.MemoryType = "" }, wantField: "memory_type",
			wantErr: "memory_type: memory type is empty (want one of working, episodic, semantic, procedural)"},
		{name: "bad type", mut: func(it *Item) { it.MemoryType = "longterm" }, wantField: "memory_type",
			wantErr: `memory_type: unknown memory type "longterm" (want one of working, episodic, semantic, procedural)`},
		{name: "no scope", mut: func(it *Item) { it.Scope = "" }, wantField: "scope",
			wantErr: "scope: scope is empty (want <kind>:<id> with kind user, session or agent)"},
		{name: "bad scope", mut: func(it *Item) { it.Scope = "org:1" }, wantField: "scope",
			wantErr: `scope: scope "org:1": unknown scope kind "org" (want user, session or agent)`},
		{name: "key with newline", mut: func(it *Item) { it.Key = "a\nb" }, wantField: "key",
			wantErr: `key: has a control character '\n' at offset 1`},
		{name: "key padded", mut: func(it *Item) { it.Key = " address" }, wantField: "key",
			wantErr: "key: has leading or trailing whitespace"},
		{name: "key too long", mut: func(it *Item) { it.Key = strings.Repeat("k", 201) }, wantField: "key",
			wantErr: "key: is 201 bytes long (at most 200)"},
		{name: "no content", mut: func(it *Item) { it.Content = nil }, wantField: "content",
			wantErr: "content: is empty (must be a JSON object)"},
		{name: "string content", mut: func(it *Item) { it.Content = json.RawMessage(`"likes oat milk"`) }, wantField: "content",
			wantErr: "content: must be a JSON object, got a string"},
		{name: "array content", mut: func(it *Item) { it.Content = json.RawMessage(`[1]`) }, wantField: "content",
			wantErr: "content: must be a JSON object, got an array"},
		{name: "null content", mut: func(it *Item) { it.Content = json.RawMessage(`null`) }, wantField: "content",
			wantErr: "content: must be a JSON object, got null"},
		{name: "valid surrogate pair", mut: func(it *Item) { it.Content = json.RawMessage(`{"smile":"\ud83d\ude00","esc":"\\ud800"}`) }},
		{name: "lone high surrogate", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":"x\ud83d"}`) }, wantField: "content",
			wantErr: `content: has a lone UTF-16 surrogate \ud83d at offset 7 (a high surrogate must be followed by a low one), which PostgreSQL jsonb cannot store`},
		{name: "high surrogate before a non-surrogate", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":"\ud83d\u0041"}`) }, wantField: "content",
			wantErr: `content: has a lone UTF-16 surrogate \ud83d at offset 6 (a high surrogate must be followed by a low one), which PostgreSQL jsonb cannot store`},
		{name: "lone low surrogate in a key", mut: func(it *Item) { it.Content = json.RawMessage(`{"\uDE00":1}`) }, wantField: "content",
			wantErr: `content: has a lone UTF-16 surrogate \ude00 at offset 2 (a low surrogate must follow a high one), which PostgreSQL jsonb cannot store`},
		{name: "invalid UTF-8", mut: func(it *Item) { it.Content = json.RawMessage("{\"a\":\"caf\xe9\"}") }, wantField: "content",
			wantErr: "content: is not valid UTF-8 (byte 0xe9 at offset 9)"},
		{name: "lone surrogate in history", mut: func(it *Item) {
			it.History = []Revision{{Content: json.RawMessage(`{"a":"\udc00"}`), UpdatedAt: t0, SupersededAt: t0}}
		}, wantField: "history[0].content",
			wantErr: `history[0].content: has a lone UTF-16 surrogate \udc00 at offset 6 (a low surrogate must follow a high one), which PostgreSQL jsonb cannot store`},
		{name: "invalid json", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":}`) }, wantField: "content",
			wantErr: "content: invalid JSON: invalid character '}' looking for beginning of value"},
		{name: "trailing data", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":1}{}`) }, wantField: "content",
			wantErr: "content: invalid JSON: data after the top-level value"},
		{name: "NUL in content", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":["x\u0000"]}`) }, wantField: "content",
			wantErr: `content: contains a NUL character (\u0000), which PostgreSQL jsonb cannot store`},
		{name: "huge exponent", mut: func(it *Item) { it.Content = json.RawMessage(`{"a":1e99999999}`) }, wantField: "content",
			wantErr: "content: number 1e99999999 is out of range"},
		{name: "source control char", mut: func(it *Item) { it.Source = "x\x00" }, wantField: "source",
			wantErr: `source: has a control character '\x00' at offset 1`},
		{name: "NaN score", mut: func(it *Item) { it.BaseScore = math.NaN() }, wantField: "base_score",
			wantErr: "base_score: is NaN (must be a finite number)"},
		{name: "Inf score", mut: func(it *Item) { it.BaseScore = math.Inf(1) }, wantField: "base_score",
			wantErr: "base_score: is +Inf (must be a finite number)"},
		{name: "negative score", mut: func(it *Item) { it.BaseScore = -0.5 }, wantField: "base_score",
			wantErr: "base_score: is -0.5 (must not be negative)"},
		{name: "no created_at", mut: func(it *Item) { it.CreatedAt = zero }, wantField: "created_at", wantErr: "created_at: is not set"},
		{name: "no updated_at", mut: func(it *Item) { it.UpdatedAt = zero }, wantField: "updated_at", wantErr: "updated_at: is not set"},
		{name: "updated before created", mut: func(it *Item) { it.UpdatedAt = t0.Add(-time.Second) }, wantField: "updated_at",
			wantErr: "updated_at: 2024-05-01T11:59:59Z is before created_at 2024-05-01T12:00:00Z"},
		{name: "zero expires_at", mut: func(it *Item) { it.ExpiresAt = &zero }, wantField: "expires_at",
			wantErr: "expires_at: is the zero time (leave it unset for no expiry)"},
		{name: "zero archived_at", mut: func(it *Item) { it.ArchivedAt = &zero }, wantField: "archived_at",
			wantErr: "archived_at: is the zero time (leave it unset when not archived)"},
		{name: "history string content", mut: func(it *Item) {
			it.History = []Revision{
				{Content: json.RawMessage(`{}`), UpdatedAt: t0, SupersededAt: t0},
				{Content: json.RawMessage(`"x"`), UpdatedAt: t0, SupersededAt: t0},
			}
		}, wantField: "history[1].content", wantErr: "history[1].content: must be a JSON object, got a string"},
		{name: "history no superseded_at", mut: func(it *Item) {
			it.History = []Revision{{Content: json.RawMessage(`{}`), UpdatedAt: t0}}
		}, wantField: "history[0].superseded_at", wantErr: "history[0].superseded_at: is not set"},
		{name: "NaN embedding", mut: func(it *Item) { it.Embedding = []float32{1, float32(math.NaN())} }, wantField: "embedding",
			wantErr: "embedding: element 1 is NaN (must be finite)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := validItem()
			tt.mut(&it)
			err := it.Validate()
			// ValidatedHash validates the same way, then hashes like ContentHash.
			hash, herr := it.ValidatedHash()
			if fmt.Sprint(herr) != fmt.Sprint(err) {
				t.Fatalf("ValidatedHash() error = %v, Validate() = %v", herr, err)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if want, _ := it.ContentHash(); !bytes.Equal(hash, want) {
					t.Fatalf("ValidatedHash() = %x, ContentHash() = %x", hash, want)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("Validate() field = %+v, want %q", fe, tt.wantField)
			}
		})
	}
}

func TestItemJSONFieldNames(t *testing.T) {
	it := validItem()
	exp := t0.Add(6 * time.Hour)
	it.ExpiresAt = &exp
	it.History = []Revision{{Content: json.RawMessage(`{"drink":"espresso"}`), Source: "s", BaseScore: 0.5, UpdatedAt: t0, SupersededAt: t0.Add(time.Hour)}}
	it.Embedding = []float32{0.5}
	b, err := json.Marshal(it)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"memory_id":"01hx-test","memory_type":"semantic","scope":"user:1024","key":"preference.coffee",` +
		`"content":{"drink":"flat white","milk":"oat"},"source":"langgraph@0.2","base_score":0.9,` +
		`"created_at":"2024-05-01T12:00:00Z","updated_at":"2024-05-01T13:00:00Z","expires_at":"2024-05-01T18:00:00Z",` +
		`"history":[{"content":{"drink":"espresso"},"source":"s","base_score":0.5,"updated_at":"2024-05-01T12:00:00Z","superseded_at":"2024-05-01T13:00:00Z"}],` +
		`"embedding":[0.5]}`
	if string(b) != want {
		t.Fatalf("json =\n%s\nwant\n%s", b, want)
	}
	bare := Item{MemoryID: "x", MemoryType: Working, Scope: "session:1", Content: json.RawMessage(`{}`), CreatedAt: t0, UpdatedAt: t0}
	b, _ = json.Marshal(bare)
	want = `{"memory_id":"x","memory_type":"working","scope":"session:1","content":{},"source":"","base_score":0,` +
		`"created_at":"2024-05-01T12:00:00Z","updated_at":"2024-05-01T12:00:00Z"}`
	if string(b) != want {
		t.Fatalf("json =\n%s\nwant\n%s", b, want)
	}
	var back Item
	if err := json.Unmarshal(b, &back); err != nil || back.MemoryType != Working || string(back.Content) != "{}" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func TestSetDefaults(t *testing.T) {
	var it Item
	it.SetDefaults(t0)
	if it.MemoryID == "" || !it.CreatedAt.Equal(t0) || !it.UpdatedAt.Equal(t0) {
		t.Fatalf("SetDefaults on empty item = %+v", it)
	}
	it = validItem()
	before := it
	it.SetDefaults(t0.Add(99 * time.Hour))
	if it.MemoryID != before.MemoryID || !it.CreatedAt.Equal(before.CreatedAt) || !it.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("SetDefaults overwrote set fields: %+v", it)
	}
	it = Item{CreatedAt: t0}
	it.SetDefaults(t0.Add(time.Hour))
	if !it.UpdatedAt.Equal(t0) {
		t.Fatalf("UpdatedAt = %v, want CreatedAt %v", it.UpdatedAt, t0)
	}
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "a" : [ 1 , { "z" : null , "y" : true } ] } `, `{"a":[1,{"y":true,"z":null}]}`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`{"s":"<&>é\n\"\\"}`, `{"s":"<&>é\n\"\\"}`},
		{`{"s":"\u00e9"}`, `{"s":"é"}`},
		{`1.50`, `1.5`},
		{`15e-1`, `1.5`},
		{`0.15E1`, `1.5`},
		{`100`, `100`},
		{`1e2`, `100`},
		{`100.000`, `100`},
		{`-0`, `0`},
		{`-0.0e5`, `0`},
		{`0.000`, `0`},
		{`-12.5`, `-12.5`},
		{`0.001`, `0.001`},
		{`1e-7`, `1e-7`},
		{`0.0000012`, `0.0000012`},
		{`0.00000012`, `1.2e-7`},
		{`123456789012345678901`, `123456789012345678901`},
		{`1234567890123456789012`, `1.234567890123456789012e+21`},
		{`12345678901234567890123456789`, `1.2345678901234567890123456789e+28`},
		{`1e400`, `1e+400`},
		{`-2.5E-400`, `-2.5e-400`},
		{`0.1000000000000000000001`, `0.1000000000000000000001`},
	}
	for _, tt := range tests {
		got, err := CanonicalJSON([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} x`, `1e9999999999`} {
		if got, err := CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%q) = %s, want error", bad, got)
		}
	}
}

func TestContentHash(t *testing.T) {
	base := validItem()
	h0, err := base.ContentHash()
	if err != nil {
		t.Fatal(err)
	}
	if len(h0) != 32 {
		t.Fatalf("hash length = %d, want 32", len(h0))
	}
	// A golden value: the scheme is persisted, so it must not change by accident.
	if got, want := hex.EncodeToString(h0), goldenHash; got != want {
		t.Fatalf("hash = %s, want %s", got, want)
	}

	same := []struct {
		name string
		mut  func(*Item)
	}{
		{"identical", func(*Item) {}},
		{"key order", func(it *Item) { it.Content = json.RawMessage(`{"milk":"oat","drink":"flat white"}`) }},
		{"whitespace", func(it *Item) {
			it.Content = json.RawMessage("{\n  \"drink\": \"flat white\",\n  \"milk\": \"oat\"\n}")
		}},
		{"escaped", func(it *Item) { it.Content = json.RawMessage(`{"dr\u0069nk":"flat white","milk":"oat"}`) }},
		{"other id", func(it *Item) { it.MemoryID = "other" }},
		{"other scope", func(it *Item) { it.Scope = "user:2048" }},
		{"other score, source, times", func(it *Item) {
			it.BaseScore, it.Source, it.CreatedAt, it.UpdatedAt = 0.1, "mem0", t0.Add(time.Hour), t0.Add(2*time.Hour)
		}},
	}
	for _, tt := range same {
		it := validItem()
		tt.mut(&it)
		h, err := it.ContentHash()
		if err != nil || !bytes.Equal(h, h0) {
			t.Errorf("%s: hash %x, %v; want %x", tt.name, h, err, h0)
		}
	}
	differ := []struct {
		name string
		mut  func(*Item)
	}{
		{"content value", func(it *Item) { it.Content = json.RawMessage(`{"drink":"flat white","milk":"soy"}`) }},
		{"number vs string", func(it *Item) { it.Content = json.RawMessage(`{"drink":"flat white","milk":"oat","n":"1"}`) }},
		{"type", func(it *Item) { it.MemoryType = Episodic }},
		{"key", func(it *Item) { it.Key = "preference.tea" }},
		{"no key", func(it *Item) { it.Key = "" }},
	}
	seen := map[string]string{hex.EncodeToString(h0): "base"}
	for _, tt := range differ {
		it := validItem()
		tt.mut(&it)
		h, err := it.ContentHash()
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[hex.EncodeToString(h)]; dup {
			t.Errorf("%s: hash equals that of %s", tt.name, prev)
		}
		seen[hex.EncodeToString(h)] = tt.name
	}
	// Length-prefixed fields: moving bytes between key and type cannot collide.
	a := Item{MemoryType: "ab", Key: "c", Content: json.RawMessage(`{}`)}
	b := Item{MemoryType: "a", Key: "bc", Content: json.RawMessage(`{}`)}
	ha, _ := a.ContentHash()
	hb, _ := b.ContentHash()
	if bytes.Equal(ha, hb) {
		t.Error("field boundaries are ambiguous")
	}
	// Numbers spelled differently but equal hash the same (jsonb round trips rewrite them).
	n1 := Item{MemoryType: Semantic, Content: json.RawMessage(`{"x":1.50,"y":1e2}`)}
	n2 := Item{MemoryType: Semantic, Content: json.RawMessage(`{"y": 100, "x": 1.5}`)}
	h1, _ := n1.ContentHash()
	h2, _ := n2.ContentHash()
	if !bytes.Equal(h1, h2) {
		t.Error("equal numbers spelled differently hash differently")
	}
	if _, err := (Item{Content: json.RawMessage(`{`)}).ContentHash(); err == nil {
		t.Error("ContentHash of invalid JSON succeeded")
	}
}

const goldenHash = "497b1578088ba613666efa058c5ca329e8f2af472239cd5d3c7ef90cd31007f8"

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewID()
		if len(id) != 26 {
			t.Fatalf("NewID() = %q, len %d, want 26", id, len(id))
		}
		if err := ValidateID(id); err != nil {
			t.Fatalf("NewID() = %q is not a valid ID: %v", id, err)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
	// Sortable by time: every ID of a later millisecond sorts after every earlier one.
	prev := ""
	for i := 0; i < 50; i++ {
		id := newIDAt(t0.Add(time.Duration(i) * time.Millisecond))
		if id <= prev {
			t.Fatalf("id %q at +%dms sorts before %q", id, i, prev)
		}
		prev = id
	}
	early := newIDAt(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	late := newIDAt(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	if early >= late {
		t.Fatalf("%q >= %q", early, late)
	}
	if a, b := newIDAt(t0), newIDAt(t0); a[:9] != b[:9] || a == b {
		t.Fatalf("same-millisecond ids %q %q: want a shared time prefix and different random parts", a, b)
	}
}

func TestEmbeddingText(t *testing.T) {
	tests := []struct {
		name, key, content, want string
	}{
		{"flat sorted", "", `{"milk":"oat","drink":"flat white"}`, "drink: flat white\nmilk: oat"},
		{"key is the root", "address", `{"street":"Hauptstr. 1","city":"Berlin"}`, "address.city: Berlin\naddress.street: Hauptstr. 1"},
		{"nested", "", `{"a":{"c":true,"b":{"d":null}},"n":1.50}`, "a.b.d: null\na.c: true\nn: 1.5"},
		{"scalar array", "", `{"tags":["x","y",3]}`, "tags: x, y, 3"},
		{"object array", "", `{"steps":[{"name":"build"},{"name":"test"}]}`, "steps.0.name: build\nsteps.1.name: test"},
		{"empties skipped", "", `{"a":{},"b":[],"c":"x"}`, "c: x"},
		{"empty with key", "k", `{}`, "k"},
		{"empty", "", `{}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			it := Item{Key: tt.key, Content: json.RawMessage(tt.content)}
			if got := it.EmbeddingText(); got != tt.want {
				t.Fatalf("EmbeddingText() = %q, want %q", got, tt.want)
			}
		})
	}
	a := Item{Content: json.RawMessage(`{"b":[1,2],"a":{"y":1,"x":2}}`)}
	b := Item{Content: json.RawMessage(`{ "a": {"x": 2, "y": 1}, "b": [1, 2] }`)}
	if a.EmbeddingText() != b.EmbeddingText() {
		t.Fatalf("text depends on formatting: %q vs %q", a.EmbeddingText(), b.EmbeddingText())
	}
}
