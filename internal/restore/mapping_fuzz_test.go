package restore

import (
	"bytes"
	"testing"
)

// FuzzMappingLoad: a scope map in either format, whatever its bytes, loads or fails
// with an error; a loaded map maps every scope without a panic.
func FuzzMappingLoad(f *testing.F) {
	for _, seed := range []string{
		"user:1,user:a\nuser:2,user:b\n", "from,to\nuser:*,tenant:*\n", "\"user:1\",\"user:x\"\n", "a,b,c\n", ",\n",
		`{"from":"user:1","to":"user:a"}` + "\n\n" + `{"from":"user:*","to":"u:*"}`, `{"from":1}`, "\xff,\xfe", "user:1,user:1\nuser:1,user:2\n",
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
			for _, scope := range []string{"user:1", "user:2", "tenant:x", "a", ""} {
				_, _, _ = m.Map(scope)
			}
		}
	})
}
