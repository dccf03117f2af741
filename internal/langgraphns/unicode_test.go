package langgraphns

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestUnicodeNamespaces: labels in any language map to scopes and back; a label
// spelled decomposed lands in the scope of its composed spelling (and comes back
// composed); the labels past the pattern and the key ride as they are.
func TestUnicodeNamespaces(t *testing.T) {
	ns, err := New([]Rule{
		{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
		{Namespace: []string{"sessions", "{id}", "*"}, Scope: "session:{id}"},
		{Namespace: []string{"cafe\u0301", "{a}"}, Scope: "agent:{a}"}, // a literal label given decomposed
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns, back   []string
		key, scope string
	}{
		{[]string{"memories", "zoë-ユーザー"}, nil, "coffee", "user:zoë-ユーザー"},
		{[]string{"memories", "zoe\u0308-ユーザー"}, []string{"memories", "zoë-ユーザー"}, "coffee", "user:zoë-ユーザー"},
		{[]string{"memories", "用户123", "家族", "e\u0301"}, nil, "成员", "user:用户123"},
		{[]string{"sessions", "tenant:acme/thread/42"}, nil, "k", "session:tenant:acme/thread/42"},
		{[]string{"sessions", "𠮷"}, nil, "k", "session:𠮷"},
		{[]string{"café", "planner"}, nil, "k", "agent:planner"},
	} {
		sl, err := ns.Slot(c.ns, c.key)
		if err != nil {
			t.Fatalf("%q: %v", c.ns, err)
		}
		if sl.Scope != c.scope {
			t.Fatalf("%q -> scope %q, want %q", c.ns, sl.Scope, c.scope)
		}
		want := c.ns
		if c.back != nil {
			want = c.back
		}
		back, key, ok := ns.Namespace(sl.Scope, sl.Key, "id")
		if !ok || !reflect.DeepEqual(back, want) || key != c.key {
			t.Fatalf("%q %q -> (%s, %q) -> %q %q, want %q", c.ns, c.key, sl.Scope, sl.Key, back, key, want)
		}
		if p, _, err := ns.Prefix(c.ns); err != nil || p.Scope != c.scope {
			t.Fatalf("Prefix(%q) = %q, %v", c.ns, p.Scope, err)
		}
	}
	for _, bad := range [][]string{
		{"memories", "a\u200db"},       // a format character
		{"memories", "😀"},              // a symbol
		{"memories", "\u0301x"},        // a mark after ':'
		{"memories", "a b"},            // a space
		{"memories", "x\nINFO forged"}, // a line break
	} {
		_, err := ns.Slot(bad, "k")
		if !errors.Is(err, ErrNoRule) {
			t.Fatalf("%q: %v, want ErrNoRule", bad, err)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Fatalf("%q: the error carries the label raw: %q", bad, err.Error())
		}
	}
	// A capture that would compose with the template's own text is refused, not
	// silently merged with another label's scope.
	comp, err := New([]Rule{{Namespace: []string{"a", "{u}"}, Scope: "user:e{u}"}})
	if err != nil {
		t.Fatal(err)
	}
	if sl, err := comp.Slot([]string{"a", "\u0301x"}, "k"); err == nil {
		t.Fatalf("a capture composing with the template mapped to %q", sl.Scope)
	}
}

// FuzzNamespaceSlot: whatever the label, the default rules either refuse the
// namespace with an error that carries no raw line break, or map it to a valid (NFC)
// scope that maps back to the label's NFC form, and the key comes back as it was.
func FuzzNamespaceSlot(f *testing.F) {
	for _, l := range []string{"u1", "zoë-ユーザー", "zoe\u0308", "a/b:c", "x\ny", "\u0301", "a.b", "", "😀", "𠮷"} {
		f.Add(l, "k", "sub")
	}
	ns, err := New(nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, label, key, sub string) {
		namespace := []string{"memories", label}
		if sub != "" {
			namespace = append(namespace, sub)
		}
		sl, err := ns.Slot(namespace, key)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("%q: the error carries a raw line break: %q", namespace, err.Error())
			}
			return
		}
		if err := memory.ValidateScope(sl.Scope); err != nil || sl.Scope != "user:"+memory.NormalizeScope(label) {
			t.Fatalf("%q -> scope %q (%v)", namespace, sl.Scope, err)
		}
		back, k, ok := ns.Namespace(sl.Scope, sl.Key, "id")
		want := append([]string{"memories", memory.NormalizeScope(label)}, namespace[2:]...)
		if !ok || !reflect.DeepEqual(back, want) || (k != key && key != "") {
			t.Fatalf("%q %q -> (%s, %q) -> %q %q", namespace, key, sl.Scope, sl.Key, back, k)
		}
	})
}
