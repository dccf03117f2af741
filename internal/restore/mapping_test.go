package restore

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

func newMapper(t *testing.T, p UnmappedPolicy) *Mapper {
	t.Helper()
	m, err := NewMapper(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func assertMaps(t *testing.T, m *Mapper, from, want string) {
	t.Helper()
	got, keep, err := m.Map(from)
	if err != nil || !keep || got != want {
		t.Fatalf("Map(%q) = %q, %v, %v; want %q", from, got, keep, err, want)
	}
}

func TestMapperExactAndPrefix(t *testing.T) {
	m := newMapper(t, UnmappedKeep)
	for _, r := range [][2]string{{"user:1024", "user:dbc0a3"}, {"user:legacy-7", "user:seven"}} {
		if err := m.AddExact(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range [][2]string{{"user:", "user:legacy-"}, {"user:legacy-", "user:"}, {"session:", "session:old."}} {
		if err := m.AddPrefix(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	assertMaps(t, m, "user:1024", "user:dbc0a3")       // exact beats prefix
	assertMaps(t, m, "user:legacy-7", "user:seven")    // exact beats the longer prefix
	assertMaps(t, m, "user:legacy-8", "user:8")        // longest prefix
	assertMaps(t, m, "user:99", "user:legacy-99")      // shorter prefix
	assertMaps(t, m, "session:abc", "session:old.abc") // another kind
	assertMaps(t, m, "agent:planner", "agent:planner") // unmapped: Keep
	if m.Len() != 2 {
		t.Fatalf("Len = %d", m.Len())
	}

	// Mapping the same scope twice: fine to the same target, an error to another.
	if err := m.AddExact("user:1024", "user:dbc0a3"); err != nil {
		t.Fatal(err)
	}
	if err := m.AddExact("user:1024", "user:other"); err == nil || !strings.Contains(err.Error(), "mapped twice") {
		t.Fatalf("remap: %v", err)
	}
	if err := m.AddPrefix("user:", "user:x-"); err == nil {
		t.Fatal("remapping a prefix: no error")
	}
}

func TestMapperRefusesInvalidScopes(t *testing.T) {
	m := newMapper(t, UnmappedKeep)
	for _, r := range [][2]string{{"user:1", "user:a b"}, {"user:1", "customer:1"}, {"user 1", "user:1"}, {"user:1", ""}} {
		if err := m.AddExact(r[0], r[1]); err == nil {
			t.Errorf("AddExact(%q, %q): no error", r[0], r[1])
		}
	}
	for _, r := range [][2]string{{"", "user:"}, {"user", "user:"}, {"users:", "user:"}, {"user:", "user:a b"}, {"user:", "user"}} {
		if err := m.AddPrefix(r[0], r[1]); err == nil {
			t.Errorf("AddPrefix(%q, %q): no error", r[0], r[1])
		}
	}
	// A prefix rule whose result is not a valid scope fails when mapping.
	if err := m.AddPrefix("user:", "user:"+strings.Repeat("x", 195)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Map("user:1234567890"); err == nil || !strings.Contains(err.Error(), "invalid scope") {
		t.Fatalf("Map to an overlong scope: %v", err)
	}
}

func TestMapperUnmappedPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   UnmappedPolicy
		target   string
		keep     bool
		unmapped bool
	}{
		{UnmappedKeep, "user:5", true, false},
		{"", "user:5", true, false},
		{UnmappedSkip, "", false, false},
		{UnmappedFail, "", false, true},
	} {
		m := newMapper(t, tc.policy)
		if err := m.AddExact("user:1", "user:one"); err != nil {
			t.Fatal(err)
		}
		assertMaps(t, m, "user:1", "user:one")
		got, keep, err := m.Map("user:5")
		if got != tc.target || keep != tc.keep || errors.Is(err, ErrUnmapped) != tc.unmapped || (err != nil) != tc.unmapped {
			t.Errorf("%q: Map(user:5) = %q, %v, %v", tc.policy, got, keep, err)
		}
	}
	if _, err := NewMapper("Drop"); err == nil {
		t.Fatal("unknown policy: no error")
	}
	var nilMapper *Mapper
	assertMaps(t, nilMapper, "user:1", "user:1")
}

func TestMapperLoadCSV(t *testing.T) {
	m := newMapper(t, UnmappedFail)
	in := "from,to\r\n" +
		"user:1,user:0f8fad5b-d9cb-469f-a165-70867728950e\r\n" +
		"\n" +
		"# a comment\n" +
		`"user:2", "user:two"` + "\n" +
		" user:3 ,user:three\n"
	n, err := m.Load(strings.NewReader(in), MapCSV)
	if err != nil || n != 3 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	assertMaps(t, m, "user:1", "user:0f8fad5b-d9cb-469f-a165-70867728950e")
	assertMaps(t, m, "user:2", "user:two")
	assertMaps(t, m, "user:3", "user:three")

	// Without a header, the first line is an entry.
	m = newMapper(t, UnmappedFail)
	if n, err := m.Load(strings.NewReader("user:1,user:9\n"), MapCSV); err != nil || n != 1 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	assertMaps(t, m, "user:1", "user:9")
}

func TestMapperLoadReportsTheBadLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format MapFormat
		in     string
		line   int
		msg    string
	}{
		{"csv fields", MapCSV, "from,to\nuser:1,user:9\nuser:2\n", 3, "2 (from,to)"},
		{"csv three fields", MapCSV, "user:1,user:9\nuser:2,user:8,user:7\n", 2, "has 3 fields"},
		{"csv bad target", MapCSV, "user:1,user:9\n\nuser:2,user:nine nine\n", 3, "to: scope"},
		{"csv bad source", MapCSV, "tenant:1,user:9\n", 1, "from: scope"},
		{"csv quote", MapCSV, "user:1,user:9\nuser:2,\"user:8\n", 2, "quote"},
		{"csv conflict", MapCSV, "user:1,user:9\nuser:2,user:8\nuser:1,user:7\n", 3, "mapped twice"},
		{"jsonl syntax", MapJSONLines, `{"from":"user:1","to":"user:9"}` + "\n" + `{"from":"user:2",` + "\n", 2, "not a"},
		{"jsonl missing", MapJSONLines, "\n" + `{"from":"user:1"}` + "\n", 2, `both "from" and "to"`},
		{"jsonl unknown member", MapJSONLines, `{"from":"user:1","to":"user:9","form":"x"}`, 1, "unknown field"},
		{"jsonl trailing", MapJSONLines, `{"from":"user:1","to":"user:9"} {}`, 1, "after the JSON object"},
		{"jsonl bad target", MapJSONLines, `{"from":"user:1","to":"user:9"}` + "\n\n" + `{"from":"user:2","to":"user:"}`, 3, "to: scope"},
		{"jsonl not an object", MapJSONLines, `["user:1","user:9"]`, 1, "not a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMapper(t, UnmappedKeep)
			_, err := m.Load(strings.NewReader(tc.in), tc.format)
			var me *MapError
			if !errors.As(err, &me) || me.Line != tc.line || !strings.Contains(err.Error(), tc.msg) ||
				!strings.Contains(err.Error(), fmt.Sprintf("line %d:", tc.line)) {
				t.Fatalf("err = %v, want line %d containing %q", err, tc.line, tc.msg)
			}
		})
	}
	m := newMapper(t, UnmappedKeep)
	if _, err := m.Load(strings.NewReader(""), "xml"); err == nil {
		t.Fatal("unknown format: no error")
	}
}

// A UTF-8 byte order mark at the start of a map file (spreadsheet exports write one)
// is not part of the first entry or header; one anywhere else is refused.
func TestMapperLoadSkipsAByteOrderMark(t *testing.T) {
	const bom = "\uFEFF"
	for _, tc := range []struct {
		format MapFormat
		in     string
	}{
		{MapCSV, bom + "from,to\nuser:1,user:9\n"},
		{MapCSV, bom + "user:1,user:9\n"},
		{MapJSONLines, bom + `{"from":"user:1","to":"user:9"}` + "\n"},
	} {
		m := newMapper(t, UnmappedFail)
		if n, err := m.Load(strings.NewReader(tc.in), tc.format); err != nil || n != 1 {
			t.Fatalf("%s with a BOM: Load = %d, %v", tc.format, n, err)
		}
		assertMaps(t, m, "user:1", "user:9")
	}
	m := newMapper(t, UnmappedFail)
	if _, err := m.Load(strings.NewReader("user:1,user:9\n"+bom+"user:2,user:8\n"), MapCSV); err == nil {
		t.Fatal("a BOM inside the map was accepted")
	}
}

func TestMapperLoadJSONLines(t *testing.T) {
	m := newMapper(t, UnmappedSkip)
	in := `{"from":"user:1","to":"user:9"}` + "\n" +
		"   \n" +
		`  {"to": "session:b", "from": "session:a"}  ` + "\r\n"
	n, err := m.Load(strings.NewReader(in), MapJSONLines)
	if err != nil || n != 2 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	assertMaps(t, m, "user:1", "user:9")
	assertMaps(t, m, "session:a", "session:b")
	if _, keep, err := m.Map("user:2"); keep || err != nil {
		t.Fatalf("unmapped under Skip: keep %v, err %v", keep, err)
	}
}

// A map of 200,000 entries costs about the size of its text plus the map's slots,
// with one allocation per entry.
func TestMapperLargeMapMemory(t *testing.T) {
	const entries = 200_000
	for _, format := range []MapFormat{MapCSV, MapJSONLines} {
		t.Run(string(format), func(t *testing.T) {
			var in bytes.Buffer
			textBytes := 0
			for i := range entries {
				from, to := fmt.Sprintf("user:%d", 1_000_000+i), fmt.Sprintf("user:%08x-d9cb-469f-a165-%012x", i, i)
				textBytes += len(from) + len(to)
				if format == MapCSV {
					fmt.Fprintf(&in, "%s,%s\n", from, to)
				} else {
					fmt.Fprintf(&in, `{"from":%q,"to":%q}`+"\n", from, to)
				}
			}
			input := in.Bytes()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m := newMapper(t, UnmappedFail)
			n, err := m.Load(bytes.NewReader(input), format)
			if err != nil || n != entries {
				t.Fatalf("Load = %d, %v", n, err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			perEntry := float64(after.HeapAlloc-before.HeapAlloc) / entries
			t.Logf("%s: %d entries, %.0f bytes of text per entry, %.0f heap bytes per entry (%.1f MiB)",
				format, entries, float64(textBytes)/entries, perEntry, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20))
			// Text (~50 bytes) rounded up to its size class, plus ~40-75 bytes of map
			// slot: well under 200. A struct or two strings per entry would not fit.
			if perEntry > 200 {
				t.Fatalf("%.0f heap bytes per entry, want at most 200", perEntry)
			}
			assertMaps(t, m, "user:1000007", "user:00000007-d9cb-469f-a165-000000000007")
			runtime.KeepAlive(input)
			runtime.KeepAlive(m)
		})
	}
}
