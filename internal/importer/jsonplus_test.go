package importer

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestDecodeJSONPlusMatchesLangGraph: the Go decoder reads what LangGraph's own
// serializer wrote (testdata/gen_jsonplus.py, run with the real langgraph) exactly as
// LangGraph's msgpack-to-JSON reviver does.
func TestDecodeJSONPlusMatchesLangGraph(t *testing.T) {
	dir := filepath.Join("testdata", "jsonplus")
	raw, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]any
	if err := json.Unmarshal(raw, &expected); err != nil {
		t.Fatal(err)
	}
	for name, want := range expected {
		b, err := os.ReadFile(filepath.Join(dir, name+".msgpack"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeJSONPlus(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Compare as JSON: numbers become float64 on both sides.
		gj, _ := json.Marshal(got)
		var g any
		_ = json.Unmarshal(gj, &g)
		if !reflect.DeepEqual(g, want) {
			t.Errorf("%s:\n got  %s\n want %s", name, gj, mustJSON(want))
		}
	}
	// Tool call arguments are objects and list content is a list, never strings.
	b, _ := os.ReadFile(filepath.Join(dir, "messages.msgpack"))
	v, _ := DecodeJSONPlus(b)
	msgs := v.([]any)
	args := msgs[2].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["args"]
	if _, ok := args.(map[string]any); !ok {
		t.Errorf("tool call args decoded as %T", args)
	}
	if _, ok := msgs[4].(map[string]any)["content"].([]any); !ok {
		t.Errorf("list content decoded as %T", msgs[4].(map[string]any)["content"])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDecodeJSONPlusRefuses: what the importer must not guess at is refused with
// ErrUnsupported, and corrupt input is an error, never a panic or a huge allocation.
func TestDecodeJSONPlusRefuses(t *testing.T) {
	ext := func(code int8, payload any) []byte {
		p, _ := msgpack.Marshal(payload)
		hdr := []byte{0xc7, byte(len(p)), byte(code)}
		return append(hdr, p...)
	}
	for name, b := range map[string][]byte{
		"delta snapshot": ext(7, []any{1, 2}),
		"numpy":          ext(6, []any{"<f4", []any{2}, "C", []byte{0, 0}}),
		"unknown ext":    ext(42, []any{"a"}),
	} {
		if _, err := DecodeJSONPlus(b); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	for _, typ := range []string{"pickle", "msgpack+aes", "weird"} {
		if _, _, err := DecodeTyped(typ, []byte{0x90}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("type %s: %v, want ErrUnsupported", typ, err)
		}
	}
	for name, b := range map[string][]byte{
		"truncated":      {0x92, 0x01},
		"huge array":     {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge map":       {0xdf, 0x7f, 0xff, 0xff, 0xff},
		"trailing bytes": {0x01, 0x02},
		"empty":          {},
	} {
		if _, err := DecodeJSONPlus(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	deep := make([]byte, 0, 300)
	for range 300 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	if _, err := DecodeJSONPlus(deep); err == nil {
		t.Error("300 nested arrays decoded")
	}
}

func FuzzDecodeJSONPlus(f *testing.F) {
	for _, name := range []string{"messages", "scalars", "extras"} {
		b, err := os.ReadFile(filepath.Join("testdata", "jsonplus", name+".msgpack"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeJSONPlus(b)
		want, werr := refDecodeJSONPlus(b, false)
		if (err == nil) != (werr == nil) || !reflect.DeepEqual(v, want) {
			t.Fatalf("DecodeJSONPlus = %v, %v; the reference decoder gives %v, %v", v, err, want, werr)
		}
		if err == nil {
			if _, err := json.Marshal(v); err != nil {
				t.Fatalf("decoded a value encoding/json cannot write: %v", err)
			}
		}
		// Decoding messages leaves their metadata out, unread: wherever decoding it
		// all succeeds, it gives the same without those keys.
		m, merr := decodeJSONPlus(b, true)
		want, werr = refDecodeJSONPlus(b, true)
		if werr == nil && (merr != nil || !reflect.DeepEqual(m, want)) {
			t.Fatalf("decoding messages = %v, %v; want %v", m, merr, want)
		}
	})
}

// TestOpenLangGraphSQLiteRefusesBadFiles: a corrupt file, a file that is not SQLite and
// a SQLite database of something else are refused with a clear error before anything
// is read.
func TestOpenLangGraphSQLiteRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	notSQLite := filepath.Join(dir, "notes.txt")
	_ = os.WriteFile(notSQLite, []byte("this is not a database\n"), 0o600)
	corrupt := filepath.Join(dir, "corrupt.sqlite")
	_ = os.WriteFile(corrupt, append([]byte("SQLite format 3\x00"), make([]byte, 4000)...), 0o600)
	for name, path := range map[string]string{"not SQLite": notSQLite, "corrupt": corrupt, "missing": filepath.Join(dir, "missing.sqlite")} {
		if _, err := OpenLangGraphSQLite(context.Background(), path); err == nil {
			t.Errorf("%s: opened", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
