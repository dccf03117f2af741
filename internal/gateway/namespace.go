package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// LangGraph namespaces are tuples of labels; our memories live in scopes. A rule maps
// one onto the other both ways, and the labels past the rule's pattern (its "*") ride
// in the memory's key, so a namespace written through the LangGraph API comes back
// exactly as written.

var captureRE = regexp.MustCompile(`\{([a-z][a-z0-9_]*)\}`)

// rule is a compiled NamespaceRule.
type rule struct {
	src      NamespaceRule
	labels   []string // literal label, or "{name}"
	wildcard bool     // a final "*": any further labels
	// inverse matches a scope this rule produces; its groups are the captures, in
	// the order of names.
	inverse *regexp.Regexp
	names   []string
}

func compileRule(r NamespaceRule) (*rule, error) {
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
		if err := validLabel(l); err != nil {
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

// validLabel is LangGraph's rule for a namespace label: not empty, no '.'.
func validLabel(l string) error {
	switch {
	case l == "":
		return errors.New("namespace labels must not be empty")
	case strings.Contains(l, "."):
		return fmt.Errorf("namespace label %q contains '.'", l)
	}
	return nil
}

// match maps a namespace to a scope and the labels past the pattern.
func (c *rule) match(ns []string) (scope string, rest []string, ok bool) {
	if len(ns) < len(c.labels) || (!c.wildcard && len(ns) != len(c.labels)) {
		return "", nil, false
	}
	vals := map[string]string{}
	for i, l := range c.labels {
		if m := captureRE.FindStringSubmatch(l); m != nil && m[0] == l {
			vals[m[1]] = ns[i]
		} else if ns[i] != l {
			return "", nil, false
		}
	}
	scope = captureRE.ReplaceAllStringFunc(c.src.Scope, func(s string) string { return vals[s[1:len(s)-1]] })
	if memory.ValidateScope(scope) != nil {
		return "", nil, false
	}
	// The scope must map back to this namespace: a capture holding the template's
	// own separators would be ambiguous.
	if back, ok := c.namespaceOf(scope); !ok || !equalLabels(back, ns[:len(c.labels)]) {
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
			if validLabel(ns[i]) != nil {
				return nil, false
			}
		} else {
			ns[i] = l
		}
	}
	return ns, true
}

func equalLabels(a, b []string) bool {
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

// namespaces maps between LangGraph namespaces and scopes with an ordered rule list.
type namespaces struct{ rules []*rule }

func newNamespaces(rules []NamespaceRule) (*namespaces, error) {
	if len(rules) == 0 {
		rules = DefaultNamespaceRules()
	}
	n := &namespaces{}
	for i, r := range rules {
		c, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("namespace rule %d: %w", i, err)
		}
		// Two rules whose scopes could coincide would give a memory two namespaces:
		// their templates' literal starts must not be prefixes of one another.
		for j, prev := range n.rules {
			a, b := literalStart(prev.src.Scope), literalStart(r.Scope)
			if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
				return nil, fmt.Errorf("namespace rules %d (%s) and %d (%s) can map to the same scope; give each scope kind one rule", j, prev.src.Scope, i, r.Scope)
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

// errNoRule is returned for a namespace no rule maps.
var errNoRule = errors.New("no namespace rule maps this namespace to a scope")

// slot is where a LangGraph item lives in the store: a scope and a memory key.
type slot struct {
	scope, key string
	rule       *rule
}

// toSlot maps (namespace, key) to a scope and memory key. The labels past the rule's
// pattern and the key are encoded in the memory key (see encodeKey).
func (n *namespaces) toSlot(ns []string, key string) (slot, error) {
	for _, l := range ns {
		if err := validLabel(l); err != nil {
			return slot{}, err
		}
	}
	for _, r := range n.rules {
		if scope, rest, ok := r.match(ns); ok {
			return slot{scope: scope, key: encodeKey(r.wildcard, rest, key), rule: r}, nil
		}
	}
	return slot{}, fmt.Errorf("%w: (%s)", errNoRule, strings.Join(ns, ", "))
}

// scopeOf maps a namespace prefix to the one scope it lies in, and the labels of the
// prefix past the rule's pattern (a search or list narrows to memory keys starting
// with them). A prefix shorter than a rule's pattern spans scopes: refused, as a search
// never crosses scopes.
func (n *namespaces) scopeOf(prefix []string) (slot, []string, error) {
	for _, l := range prefix {
		if err := validLabel(l); err != nil {
			return slot{}, nil, err
		}
	}
	for _, r := range n.rules {
		if len(prefix) < len(r.labels) {
			continue
		}
		if scope, rest, ok := r.match(prefix); ok {
			return slot{scope: scope, rule: r}, rest, nil
		}
	}
	return slot{}, nil, fmt.Errorf("%w: the namespace prefix (%s) must name one scope (for example %s)", errNoRule, strings.Join(prefix, ", "), n.example())
}

func (n *namespaces) example() string {
	r := n.rules[0]
	return "(" + strings.Join(r.labels, ", ") + ")"
}

// toNamespace maps a stored memory back to its LangGraph namespace and key. Memories
// written outside the LangGraph API (no rule's encoding) appear under the first rule
// that maps their scope, with their key (or memory_id when they have none).
func (n *namespaces) toNamespace(scope, memKey, memoryID string) ([]string, string, bool) {
	for _, r := range n.rules {
		ns, ok := r.namespaceOf(scope)
		if !ok {
			continue
		}
		rest, key := decodeKey(r.wildcard, memKey)
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

// decodeKey is the inverse of encodeKey.
func decodeKey(wildcard bool, memKey string) (rest []string, key string) {
	if !wildcard || !strings.HasPrefix(memKey, "[") {
		return nil, memKey
	}
	var parts []string
	if err := json.Unmarshal([]byte(memKey), &parts); err != nil || len(parts) == 0 {
		return nil, memKey
	}
	return parts[:len(parts)-1], parts[len(parts)-1]
}
