package memory

import (
	"slices"
	"testing"
)

func TestParseType(t *testing.T) {
	tests := []struct {
		in      string
		want    Type
		wantErr string
	}{
		{in: "working", want: Working},
		{in: "episodic", want: Episodic},
		{in: "semantic", want: Semantic},
		{in: "procedural", want: Procedural},
		{in: "", wantErr: "memory type is empty (want one of working, episodic, semantic, procedural)"},
		{in: "Semantic", wantErr: `unknown memory type "Semantic" (want one of working, episodic, semantic, procedural)`},
		{in: " semantic", wantErr: `unknown memory type " semantic" (want one of working, episodic, semantic, procedural)`},
		{in: "long-term", wantErr: `unknown memory type "long-term" (want one of working, episodic, semantic, procedural)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseType(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseType(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				if got != "" {
					t.Fatalf("ParseType(%q) = %q on error, want empty", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseType(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestAllTypes(t *testing.T) {
	got := AllTypes()
	want := []Type{"working", "episodic", "semantic", "procedural"}
	if !slices.Equal(got, want) {
		t.Fatalf("AllTypes() = %v, want %v", got, want)
	}
	for _, ty := range got {
		if !ty.Valid() {
			t.Errorf("%q.Valid() = false", ty)
		}
	}
	got[0] = "mutated"
	if AllTypes()[0] != Working {
		t.Fatal("AllTypes returns a shared slice")
	}
}
