package snapshot

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// stdItemJSON is the reference: encoding/json without HTML escaping.
func stdItemJSON(it *memory.Item) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(itemLine{Item: it, Embedding: it.Embedding}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func nastyStrings() []string {
	var all strings.Builder
	for b := 0; b < 0x80; b++ {
		all.WriteByte(byte(b))
	}
	return []string{
		"", all.String(), "\xff\xfe invalid \xc3", "sep\u2028para\u2029", "😀 emoji 北京 café",
		`<script>&amp;</script>`, "\x7f del", "trailing \xe2\x80", "\\\"",
	}
}

func TestAppendItemMatchesEncodingJSON(t *testing.T) {
	items := genItems(genOptions{items: 300, scopes: 30, dim: 8, seed: 21})
	r := rand.New(rand.NewPCG(3, 4))
	zone := time.FixedZone("IST", 5*3600+1800)
	for i, s := range nastyStrings() {
		it := items[i]
		it.MemoryID, it.Key, it.Source, it.MemoryType = s, s, s, memory.Type(s)
		items = append(items, it)
	}
	for i := 0; i < 200; i++ {
		it := items[i]
		it.BaseScore = math.Float64frombits(r.Uint64())
		if math.IsNaN(it.BaseScore) || math.IsInf(it.BaseScore, 0) {
			it.BaseScore = 0
		}
		it.Embedding = make([]float32, 5)
		for j := range it.Embedding {
			f := math.Float32frombits(r.Uint32())
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				f = 1
			}
			it.Embedding[j] = f
		}
		it.CreatedAt = time.Unix(r.Int64N(1<<35), r.Int64N(1e9)).In(zone)
		if i%2 == 0 {
			it.RecordedAt = time.Unix(r.Int64N(1<<35), r.Int64N(1e9)).In(zone)
		}
		items = append(items, it)
	}
	special := items[0]
	special.Embedding = []float32{0, float32(math.Copysign(0, -1)), 1e-7, 1e-6, 1e20, 1e21, math.MaxFloat32, math.SmallestNonzeroFloat32, -3.25}
	special.BaseScore = 1e21
	special.Content = json.RawMessage(" {\n \"a\" : [ 1 , 2.5e+10 , -0.0 , true , false , null , \"x\\u00e9\\n\" ] ,\t\"b\" : { } , \"c\":[ ] } \n")
	special.History = []memory.Revision{{Content: nil}, {Content: json.RawMessage(`{"k":"v"}`), BaseScore: 5e-324}}
	special.ExpiresAt = new(time.Time)
	*special.ExpiresAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	archived := time.Date(0, 1, 1, 0, 0, 0, 0, zone)
	special.ArchivedAt = &archived
	special.RecordedAt = time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC) // one nanosecond past zero
	empty := memory.Item{}
	emptySlices := memory.Item{History: []memory.Revision{}, Embedding: []float32{}}
	items = append(items, special, empty, emptySlices)

	for i := range items {
		want, err := stdItemJSON(&items[i])
		if err != nil {
			t.Fatalf("item %d: encoding/json: %v", i, err)
		}
		got, err := appendItem([]byte("prefix"), &items[i])
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
		if !bytes.Equal(got[len("prefix"):], want) {
			t.Fatalf("item %d:\n got %s\nwant %s", i, got[len("prefix"):], want)
		}
	}
}

func TestAppendItemRefusesWhatEncodingJSONRefuses(t *testing.T) {
	base := genItems(genOptions{items: 1, scopes: 1, seed: 5})[0]
	edits := map[string]func(it *memory.Item){
		"NaN score":         func(it *memory.Item) { it.BaseScore = math.NaN() },
		"Inf embedding":     func(it *memory.Item) { it.Embedding = []float32{float32(math.Inf(1))} },
		"invalid content":   func(it *memory.Item) { it.Content = json.RawMessage(`{"a":}`) },
		"two values":        func(it *memory.Item) { it.Content = json.RawMessage(`{} {}`) },
		"empty content":     func(it *memory.Item) { it.Content = json.RawMessage{} },
		"control in string": func(it *memory.Item) { it.Content = json.RawMessage("{\"a\":\"\x01\"}") },
		"bad history":       func(it *memory.Item) { it.History = []memory.Revision{{Content: json.RawMessage(`[`)}} },
		"year 10000":        func(it *memory.Item) { it.UpdatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
		"negative year":     func(it *memory.Item) { it.CreatedAt = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC) },
	}
	for name, edit := range edits {
		it := base
		edit(&it)
		if _, err := stdItemJSON(&it); err == nil {
			t.Fatalf("%s: encoding/json accepts it; the case proves nothing", name)
		}
		if _, err := appendItem(nil, &it); err == nil {
			t.Errorf("%s: appendItem accepted it", name)
		}
	}
}

// appendItem knows memory.Item's fields by heart; a new field must be added to it.
func TestAppendItemKnowsEveryField(t *testing.T) {
	tags := func(v any) string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			out = append(out, typ.Field(i).Tag.Get("json"))
		}
		return strings.Join(out, " ")
	}
	if got, want := tags(memory.Item{}), "memory_id memory_type scope key,omitempty content source base_score created_at updated_at recorded_at,omitzero expires_at,omitempty archived_at,omitempty history,omitempty embedding,omitempty"; got != want {
		t.Errorf("memory.Item fields changed; update appendItem (and the format version if needed):\n got %s\nwant %s", got, want)
	}
	if got, want := tags(memory.Revision{}), "content source base_score updated_at superseded_at"; got != want {
		t.Errorf("memory.Revision fields changed; update appendRevision:\n got %s\nwant %s", got, want)
	}
}

func compactSeeds() []string {
	return []string{
		`{}`, `[]`, ` { "a" : 1 } `, `{"a":[1,2,{"b":null}],"c":"d\"e"}`, `"str"`, `-0.5e-3`, `0`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{1:2}`, `tru`, `true`, `nul`, `falsey`, `"\u12G4"`, `"\x"`, `"abc`, `[`, `{"a":`, "\"a\tb\"",
		"\"\xff\xfe\"", `"\u2028"`, "\"\u2028\"", `[1 2]`, `{"a":1}{"b":2}`, ``, `   `, `[[[[[]]]]]`, `{"a":{"b":{"c":[true,false,null]}}}`,
		"{\"k\":\"<&>\"}", `1E5`, `-12.34E-56`, `[-]`, `{"a":-}`,
	}
}

func checkCompact(t *testing.T, src []byte) {
	var want bytes.Buffer
	werr := json.Compact(&want, src)
	got, gerr := appendCompact([]byte("x"), src)
	switch {
	case (werr == nil) != (gerr == nil):
		t.Fatalf("%q: json.Compact error %v, appendCompact error %v", src, werr, gerr)
	case werr == nil && !bytes.Equal(got[1:], want.Bytes()):
		t.Fatalf("%q: got %q, want %q", src, got[1:], want.Bytes())
	case gerr != nil && string(got) != "x":
		t.Fatalf("%q: failed compaction changed dst to %q", src, got)
	}
}

func TestAppendCompactMatchesJSONCompact(t *testing.T) {
	for _, s := range compactSeeds() {
		checkCompact(t, []byte(s))
	}
	deep := strings.Repeat("[", maxNesting+1) + strings.Repeat("]", maxNesting+1)
	checkCompact(t, []byte(deep))
}

func FuzzAppendCompact(f *testing.F) {
	for _, s := range compactSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		checkCompact(t, src)
	})
}
