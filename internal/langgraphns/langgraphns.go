// Package langgraphns maps LangGraph store namespaces (tuples of labels) to memory
// scopes and back, by declared rules. The gateway's LangGraph Store API and the
// LangGraph importer share it, so a namespace means the same scope on both paths.
package langgraphns

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/memory"
)

// LangGraph namespaces are tuples of labels; our memories live in scopes. A rule maps
// one onto the other both ways, and the labels past the rule's pattern (its "*") ride
// in the memory's key, so a namespace written through the LangGraph API comes back
// exactly as written.

// Rule maps LangGraph store namespaces to scopes. Namespace is a pattern of labels: a
// literal label matches itself, "{name}" captures one label, and a final "*" matches
// any number (zero or more) of further labels. Scope is a template over the captures
// ("user:{user}"). Rules are tried in order; the first that matches wins. A namespace
// no rule matches is refused, never stored in some default scope. Two rules that can
// produce the same scope are refused: a memory's namespace must be unambiguous, so
// that what a client writes comes back under the namespace it used.
type Rule struct {
	Namespace []string `json:"namespace"`
	Scope     string   `json:"scope"`
}

// DefaultRules are used when none are declared: ("memories", "<user>", ...) lands in
// user:<user> (the layout of LangGraph's memory examples), ("sessions", "<id>", ...)
// in session:<id> and ("agents", "<id>", ...) in agent:<id>. One rule per scope kind,
// so every memory has exactly one namespace.
func DefaultRules() []Rule {
	return []Rule{
		{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
		{Namespace: []string{"sessions", "{id}", "*"}, Scope: "session:{id}"},
		{Namespace: []string{"agents", "{id}", "*"}, Scope: "agent:{id}"},
	}
}

var captureRE = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)

// rule is a compiled Rule.
type rule struct {
	src      Rule
	labels   []string // literal label, or "{name}"
	wildcard bool     // a final "*": any further labels
	// inverse matches a scope this rule produces; its groups are the captures, in
	// the order of names.
	inverse *regexp.Regexp
	names   []string
}

func compileRule(r Rule) (*rule, error) {
	// Rules are compared with NFC namespaces and make NFC scopes (see match).
	r.Scope = memory.NormalizeScope(r.Scope)
	r.Namespace = append([]string(nil), r.Namespace...)
	for i, l := range r.Namespace {
		r.Namespace[i] = memory.NormalizeScope(l)
	}
	c := &rule{src: r, labels: r.Namespace}
	if n := len(c.labels); n > 0 && c.labels[n-1] == "*" {
		c.wildcard, c.labels = true, c.labels[:n-1]
	}
	if len(c.labels) == 0 {
		return nil, errors.New("namespace needs at least one label before '*'")
	}
	captured := map[string]bool{}
	for _, l := range c.labels {
		if m := captureRE.FindStringSubmatch(l); m != nil && m[0] == l {
			if captured[m[1]] {
				return nil, fmt.Errorf("capture %s appears twice in the namespace", l)
			}
			captured[m[1]] = true
			continue
		}
		if err := ValidLabel(l); err != nil {
			return nil, err
		}
		if strings.ContainsAny(l, "{}*") {
			return nil, fmt.Errorf("namespace label %q: a capture is a whole label, \"{name}\"", l)
		}
	}
	// The scope template uses every capture exactly once, so a scope maps back to one
	// namespace.
	var pattern strings.Builder
	pattern.WriteString("^")
	last := 0
	used := map[string]bool{}
	for _, m := range captureRE.FindAllStringSubmatchIndex(r.Scope, -1) {
		name := r.Scope[m[2]:m[3]]
		if !captured[name] {
			return nil, fmt.Errorf("scope %q uses {%s}, which the namespace does not capture", r.Scope, name)
		}
		if used[name] {
			return nil, fmt.Errorf("scope %q uses {%s} twice", r.Scope, name)
		}
		used[name] = true
		pattern.WriteString(regexp.QuoteMeta(r.Scope[last:m[0]]))
		pattern.WriteString("(.+)")
		c.names = append(c.names, name)
		last = m[1]
	}
	pattern.WriteString(regexp.QuoteMeta(r.Scope[last:]))
	pattern.WriteString("$")
	if len(used) != len(captured) {
		return nil, fmt.Errorf("scope %q must use every capture of the namespace", r.Scope)
	}
	if strings.ContainsAny(captureRE.ReplaceAllString(r.Scope, ""), "{}") {
		return nil, fmt.Errorf("scope %q: captures are written {name}", r.Scope)
	}
	c.inverse = regexp.MustCompile(pattern.String())
	// The template with a stand-in must be a valid scope.
	if err := memory.ValidateScope(captureRE.ReplaceAllString(r.Scope, "x")); err != nil {
		return nil, fmt.Errorf("scope %q: %w", r.Scope, err)
	}
	return c, nil
}

// ValidLabel is LangGraph's rule for a namespace label: not empty, no '.'; and text
// (valid UTF-8), as a Python str is: labels past a rule's pattern are kept in a JSON
// memory key, which has no room for other bytes.
func ValidLabel(l string) error {
	switch {
	case l == "":
		return errors.New("namespace labels must not be empty")
	case strings.Contains(l, "."):
		return fmt.Errorf("namespace label %q contains '.'", l)
	case !utf8.ValidString(l):
		return fmt.Errorf("namespace label %q is not valid UTF-8", l)
	}
	return nil
}

// match maps a namespace to a scope and the labels past the pattern. The labels the
// pattern covers are compared and captured NFC-normalised (memory.NormalizeScope), so
// a label spelled decomposed lands in the same scope as its composed spelling: one
// user never becomes two. The labels past the pattern ride in the memory key as they
// are.
func (c *rule) match(ns []string) (scope string, rest []string, ok bool) {
	if len(ns) < len(c.labels) || (!c.wildcard && len(ns) != len(c.labels)) {
		return "", nil, false
	}
	head := make([]string, len(c.labels))
	vals := map[string]string{}
	for i, l := range c.labels {
		head[i] = memory.NormalizeScope(ns[i])
		if m := captureRE.FindStringSubmatch(l); m != nil && m[0] == l {
			vals[m[1]] = head[i]
		} else if head[i] != l {
			return "", nil, false
		}
	}
	scope = captureRE.ReplaceAllStringFunc(c.src.Scope, func(s string) string { return vals[s[1:len(s)-1]] })
	if memory.ValidateScope(scope) != nil {
		return "", nil, false // a capture no scope id can hold, or one that composes with the template
	}
	// The scope must map back to this namespace: a capture holding the template's
	// own separators would be ambiguous.
	if back, ok := c.namespaceOf(scope); !ok || !EqualLabels(back, head) {
		return "", nil, false
	}
	return scope, ns[len(c.labels):], true
}

// namespaceOf is the namespace (the pattern's part) that maps to scope.
func (c *rule) namespaceOf(scope string) ([]string, bool) {
	m := c.inverse.FindStringSubmatch(scope)
	if m == nil {
		return nil, false
	}
	vals := map[string]string{}
	for i, name := range c.names {
		vals[name] = m[i+1]
	}
	ns := make([]string, len(c.labels))
	for i, l := range c.labels {
		if cm := captureRE.FindStringSubmatch(l); cm != nil && cm[0] == l {
			ns[i] = vals[cm[1]]
			if ValidLabel(ns[i]) != nil {
				return nil, false
			}
		} else {
			ns[i] = l
		}
	}
	return ns, true
}

// EqualLabels reports whether two label lists are the same.
func EqualLabels(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Mapper maps between LangGraph namespaces and scopes with an ordered rule list.
type Mapper struct{ rules []*rule }

// New compiles rules (DefaultRules when empty).
func New(rules []Rule) (*Mapper, error) {
	if len(rules) == 0 {
		rules = DefaultRules()
	}
	n := &Mapper{}
	for i, r := range rules {
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("namespace rule %d: %w", i, err)
		}
		// Two rules whose scopes could coincide would give a memory two namespaces:
		// their templates' literal starts must not be prefixes of one another.
		for j, prev := range n.rules {
			a, b := literalStart(prev.src.Scope), literalStart(c.src.Scope)
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return nil, fmt.Errorf("namespace rules %d (%s) and %d (%s) can map to the same scope; give each scope kind one rule", j, prev.src.Scope, i, c.src.Scope)
			}
		}
		n.rules = append(n.rules, c)
	}
	return n, nil
}

// literalStart is a scope template's text before its first capture.
func literalStart(template string) string {
	if loc := captureRE.FindStringIndex(template); loc != nil {
		return template[:loc[0]]
	}
	return template
}

// ErrNoRule is returned for a namespace no rule maps.
var ErrNoRule = errors.New("no namespace rule maps this namespace to a scope")

// Slot is where a LangGraph item lives in the store: a scope and a memory key.
type Slot struct {
	Scope, Key string
	rule       *rule
}

// Wildcard reports whether the slot's rule takes labels past its pattern (they ride in
// memory keys, see DecodeKey).
func (s Slot) Wildcard() bool { return s.rule != nil && s.rule.wildcard }

// Slot maps (namespace, key) to a scope and memory key. The labels past the rule's
// pattern and the key are encoded in the memory key (see encodeKey).
func (n *Mapper) Slot(ns []string, key string) (Slot, error) {
	for _, l := range ns {
		if err := ValidLabel(l); err != nil {
			return Slot{}, err
		}
	}
	if !utf8.ValidString(key) {
		return Slot{}, fmt.Errorf("key %q is not valid UTF-8", key)
	}
	for _, r := range n.rules {
		if scope, rest, ok := r.match(ns); ok {
			return Slot{Scope: scope, Key: encodeKey(r.wildcard, rest, key), rule: r}, nil
		}
	}
	return Slot{}, fmt.Errorf("%w: %s", ErrNoRule, quoteLabels(ns))
}

// Prefix maps a namespace prefix to the one scope it lies in, and the labels of the
// prefix past the rule's pattern (a search or list narrows to memory keys starting
// with them). A prefix shorter than a rule's pattern spans scopes: refused, as a search
// never crosses scopes.
func (n *Mapper) Prefix(prefix []string) (Slot, []string, error) {
	for _, l := range prefix {
		if err := ValidLabel(l); err != nil {
			return Slot{}, nil, err
		}
	}
	for _, r := range n.rules {
		if len(prefix) < len(r.labels) {
			continue
		}
		if scope, rest, ok := r.match(prefix); ok {
			return Slot{Scope: scope, rule: r}, rest, nil
		}
	}
	return Slot{}, nil, fmt.Errorf("%w: the namespace prefix %s must name one scope (for example %s)", ErrNoRule, quoteLabels(prefix), n.example())
}

func (n *Mapper) example() string {
	return quoteLabels(n.rules[0].labels)
}

// quoteLabels writes a namespace for a message, each label quoted: labels come from
// clients and sources, and may hold anything, a line break included.
func quoteLabels(ns []string) string {
	q := make([]string, len(ns))
	for i, l := range ns {
		q[i] = strconv.Quote(l)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// Namespace maps a stored memory back to its LangGraph namespace and key. Memories
// written outside the LangGraph API (no rule's encoding) appear under the first rule
// that maps their scope, with their key (or memory_id when they have none).
func (n *Mapper) Namespace(scope, memKey, memoryID string) ([]string, string, bool) {
	for _, r := range n.rules {
		ns, ok := r.namespaceOf(scope)
		if !ok {
			continue
		}
		rest, key := DecodeKey(r.wildcard, memKey)
		if key == "" {
			key = memoryID
		}
		return append(ns, rest...), key, true
	}
	return nil, "", false
}

// encodeKey puts the labels past a wildcard pattern and the item key into one memory
// key. Without extra labels the memory key is the item key itself (what native API
// users see), except that a key which could be read as an encoding is wrapped.
func encodeKey(wildcard bool, rest []string, key string) string {
	if !wildcard || (len(rest) == 0 && !strings.HasPrefix(key, "[")) {
		return key
	}
	b, _ := json.Marshal(append(append([]string{}, rest...), key)) // strings: cannot fail
	return string(b)
}

// DecodeKey is the inverse of encodeKey.
func DecodeKey(wildcard bool, memKey string) (rest []string, key string) {
	if !wildcard || !strings.HasPrefix(memKey, "[") {
		return nil, memKey
	}
	var parts []string
	if err := json.Unmarshal([]byte(memKey), &parts); err != nil || len(parts) == 0 {
		return nil, memKey
	}
	return parts[:len(parts)-1], parts[len(parts)-1]
}
