package restore

import (
	"bytes"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// FuzzMappingLoad: a scope map in either format, whatever its bytes, loads or fails
// with an error; every rule it loads is between valid (NFC) scopes, and a loaded map
// maps every scope without a panic.
func FuzzMappingLoad(f *testing.F) {
	for _, seed := range []string{
		"user:1,user:a\nuser:2,user:b\n", "from,to\nuser:*,tenant:*\n", "\"user:1\",\"user:x\"\n", "a,b,c\n", ",\n",
		`{"from":"user:1","to":"user:a"}` + "\n\n" + `{"from":"user:*","to":"u:*"}`, `{"from":1}`, "\xff,\xfe", "user:1,user:1\nuser:1,user:2\n",
		"\xEF\xBB\xBFuser:zoe\u0308,user:zoë-ユーザー\n", "\"session:a/b\",\"user:用户123\"\r\n", `{"from":"user:\ud842\udfb7","to":"user:\u00eb"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []MapFormat{MapCSV, MapJSONLines} {
			m, err := NewMapper(UnmappedKeep)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Load(bytes.NewReader(data), format); err != nil {
				continue
			}
			for from, to := range m.exact {
				if memory.ValidateScope(from) != nil || memory.ValidateScope(to) != nil {
					t.Fatalf("%s: rule %q -> %q is not between valid scopes", format, from, to)
				}
			}
			for _, scope := range []string{"user:1", "user:2", "tenant:x", "a", "", "user:zoë"} {
				_, _, _ = m.Map(scope)
			}
		}
	})
}
