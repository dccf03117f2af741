package memory

import (
	"strings"
	"testing"
)

func TestParseScope(t *testing.T) {
	long := strings.Repeat("a", MaxScopeIDLen)
	tests := []struct {
		in      string
		want    Scope
		wantErr string
	}{
		{in: "user:1024", want: Scope{ScopeUser, "1024"}},
		{in: "session:2024-05-01_abc.def", want: Scope{ScopeSession, "2024-05-01_abc.def"}},
		{in: "agent:support-bot", want: Scope{ScopeAgent, "support-bot"}},
		{in: "user:alice@example.com", want: Scope{ScopeUser, "alice@example.com"}},
		{in: "user:tenant:42", want: Scope{ScopeUser, "tenant:42"}},
		{in: "user:" + long, want: Scope{ScopeUser, long}},

		{in: "", wantErr: "scope is empty (want <kind>:<id> with kind user, session or agent)"},
		{in: "1024", wantErr: `scope "1024" has no kind (want <kind>:<id> with kind user, session or agent)`},
		{in: "user:", wantErr: `scope "user:": scope id is empty`},
		{in: ":1024", wantErr: `scope ":1024": scope kind is empty (want user, session or agent)`},
		{in: "team:1", wantErr: `scope "team:1": unknown scope kind "team" (want user, session or agent)`},
		{in: "User:1", wantErr: `scope "User:1": unknown scope kind "User" (want user, session or agent)`},
		{in: "user:a b", wantErr: `scope "user:a b": scope id has a disallowed character ' ' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: "user:a\tb", wantErr: `scope "user:a\tb": scope id has a disallowed character '\t' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: "user:x'", wantErr: `scope "user:x'": scope id has a disallowed character '\'' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: `user:x"`, wantErr: `scope "user:x\"": scope id has a disallowed character '"' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: `user:x\y`, wantErr: `scope "user:x\\y": scope id has a disallowed character '\\' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: `user:1" or scope != "`, wantErr: `scope "user:1\" or scope != \"": scope id has a disallowed character '"' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: "user:a/b", wantErr: `scope "user:a/b": scope id has a disallowed character '/' at offset 1 (allowed: letters, digits and -_.@:)`},
		{in: "user:é", wantErr: `scope "user:é": scope id has a disallowed character 'é' at offset 0 (allowed: letters, digits and -_.@:)`},
		{in: "user:\xff", wantErr: `scope "user:\xff": scope id has a disallowed character '�' at offset 0 (allowed: letters, digits and -_.@:)`},
		{in: "user:" + long + "a", wantErr: `scope "user:` + long + `a": scope id is 201 characters long (at most 200)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseScope(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseScope(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				if ValidateScope(tt.in) == nil {
					t.Fatalf("ValidateScope(%q) = nil", tt.in)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseScope(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestScopeValidate(t *testing.T) {
	if err := (Scope{Kind: ScopeAgent, ID: "planner"}).Validate(); err != nil {
		t.Fatalf("valid scope: %v", err)
	}
	if err := (Scope{Kind: ScopeUser}).Validate(); err == nil || err.Error() != "scope id is empty" {
		t.Fatalf("empty id: %v", err)
	}
}
