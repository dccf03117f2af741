package restore

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// UnmappedPolicy says what happens to a package scope that no mapping rule matches.
type UnmappedPolicy string

// The unmapped policies (spelled as the MemoryRestore API spells them).
const (
	// UnmappedKeep restores the scope under its own name.
	UnmappedKeep UnmappedPolicy = "Keep"
	// UnmappedSkip leaves the scope out (skipped, reason Unmapped).
	UnmappedSkip UnmappedPolicy = "Skip"
	// UnmappedFail fails the restore before anything is written.
	UnmappedFail UnmappedPolicy = "Fail"
)

// MapFormat is the format of a large scope map.
type MapFormat string

// Scope map formats.
const (
	// MapCSV is one "from,to" record per line (RFC 4180 quoting allowed), with an
	// optional "from,to" header. Blank lines and lines starting with '#' are ignored.
	MapCSV MapFormat = "csv"
	// MapJSONLines is one {"from": "...", "to": "..."} object per line; blank lines
	// are ignored, other members are refused.
	MapJSONLines MapFormat = "jsonl"
)

// ErrUnmapped is wrapped by Map for a scope no rule maps when the policy is Fail.
var ErrUnmapped = errors.New("scope is not mapped")

// MapError is a malformed line of a scope map.
type MapError struct {
	Line int // 1-based
	Err  error
}

func (e *MapError) Error() string { return fmt.Sprintf("scope map line %d: %v", e.Line, e.Err) }
func (e *MapError) Unwrap() error { return e.Err }

// maxMapLine bounds one line of a scope map (two scopes of at most ~210 bytes each,
// plus quoting or JSON syntax; generous).
const maxMapLine = 64 << 10

// Mapper renames the scopes of a package on their way into the target store.
//
// Rules, most specific first: an exact rule (from AddExact or a map file: both are
// exact, and one scope may only be mapped to one target), then the longest matching
// prefix rule, then the unmapped policy. Every target is a valid scope: exact targets
// are checked when added, prefix results when mapped.
//
// Exact entries live in one map[string]string whose keys and values share a single
// allocation per entry, so a map of hundreds of thousands of entries costs little
// more than its text (about 100 bytes per entry on top of it). A Mapper is built
// once, then safe for concurrent use by any number of goroutines calling Map. A nil
// *Mapper maps every scope to itself.
type Mapper struct {
	unmapped UnmappedPolicy
	exact    map[string]string
	prefixes []prefixRule // longest From first
}

type prefixRule struct{ from, to string }

// NewMapper returns an empty Mapper with the given unmapped policy ("" means Keep).
func NewMapper(unmapped UnmappedPolicy) (*Mapper, error) {
	if unmapped == "" {
		unmapped = UnmappedKeep
	}
	switch unmapped {
	case UnmappedKeep, UnmappedSkip, UnmappedFail:
	default:
		return nil, fmt.Errorf("restore: unknown unmapped policy %q (want Keep, Skip or Fail)", unmapped)
	}
	return &Mapper{unmapped: unmapped, exact: map[string]string{}}, nil
}

// Unmapped is the mapper's unmapped policy.
func (m *Mapper) Unmapped() UnmappedPolicy {
	if m == nil {
		return UnmappedKeep
	}
	return m.unmapped
}

// Len is the number of exact rules (map file entries included).
func (m *Mapper) Len() int {
	if m == nil {
		return 0
	}
	return len(m.exact)
}

// AddExact maps the scope from to the scope to. Both must be valid scopes once
// NFC-normalised (memory.NormalizeScope: a map typed on another system may spell
// "zoë" decomposed; package scopes are NFC). Mapping a scope a second time to another
// target is an error; to the same target, a no-op.
func (m *Mapper) AddExact(from, to string) error {
	from, to = memory.NormalizeScope(from), memory.NormalizeScope(to)
	if err := memory.ValidateScope(from); err != nil {
		return fmt.Errorf("mapping from: %w", err)
	}
	if err := memory.ValidateScope(to); err != nil {
		return fmt.Errorf("mapping %s to: %w", from, err)
	}
	// One allocation holds both strings; the map keeps substrings of it.
	both := from + to
	return m.addExact(both[:len(from)], both[len(from):])
}

func (m *Mapper) addExact(from, to string) error {
	if prev, ok := m.exact[from]; ok {
		if prev == to {
			return nil
		}
		return fmt.Errorf("scope %s is mapped twice: to %s and to %s", from, prev, to)
	}
	m.exact[from] = to
	return nil
}

// AddPrefix rewrites the start of every scope beginning with from to to, e.g.
// "user:" to "user:legacy-" (user:1024 becomes user:legacy-1024). Both are a scope
// kind and a colon followed by the start of an ID; the longest matching prefix rule
// applies. Both are NFC-normalised first, and so is what a rule makes of a scope (a
// rule may cut between a letter and its combining mark). A scope that a rule would
// turn into an invalid one (too long) is an error when mapped.
func (m *Mapper) AddPrefix(from, to string) error {
	from, to = memory.NormalizeScope(from), memory.NormalizeScope(to)
	for _, p := range []string{from, to} {
		// A valid prefix is one that becomes a valid scope when an ID character follows.
		if err := memory.ValidateScope(p + "0"); err != nil || !strings.Contains(p, ":") {
			return fmt.Errorf("mapping prefix %q: not a scope prefix (want <kind>: followed by the start of an ID, kind user, session or agent)", p)
		}
	}
	for _, r := range m.prefixes {
		if r.from == from {
			if r.to == to {
				return nil
			}
			return fmt.Errorf("scope prefix %s is mapped twice: to %s and to %s", from, r.to, to)
		}
	}
	m.prefixes = append(m.prefixes, prefixRule{from: from, to: to})
	slices.SortStableFunc(m.prefixes, func(a, b prefixRule) int { return len(b.from) - len(a.from) })
	return nil
}

// Map returns the target scope of a package scope, and keep == false when the scope
// is unmapped and the policy is Skip. An unmapped scope under Fail is an error
// wrapping ErrUnmapped; a prefix rule producing an invalid scope is an error too.
func (m *Mapper) Map(scope string) (target string, keep bool, err error) {
	if m == nil {
		return scope, true, nil
	}
	if to, ok := m.exact[scope]; ok {
		return to, true, nil
	}
	for _, r := range m.prefixes {
		if rest, ok := strings.CutPrefix(scope, r.from); ok {
			to := memory.NormalizeScope(r.to + rest)
			if err := memory.ValidateScope(to); err != nil {
				return "", false, fmt.Errorf("prefix rule %s -> %s maps %s to an invalid scope: %w", r.from, r.to, scope, err)
			}
			return to, true, nil
		}
	}
	switch m.unmapped {
	case UnmappedSkip:
		return "", false, nil
	case UnmappedFail:
		return "", false, fmt.Errorf("%w: %s (no exact or prefix rule matches and the unmapped policy is Fail)", ErrUnmapped, scope)
	}
	return scope, true, nil
}

// Load reads a large scope map in format f and adds its entries as exact rules (a
// UTF-8 byte order mark at the start is ignored; entries are NFC-normalised as
// AddExact's). It streams r: memory grows with the entries kept, not with the input.
// It returns the number of entries read; on a malformed line it stops with a
// *MapError naming the line (entries before it stay added, so discard the Mapper on
// error).
func (m *Mapper) Load(r io.Reader, f MapFormat) (int, error) {
	r = skipBOM(r)
	switch f {
	case MapCSV:
		return m.loadCSV(r)
	case MapJSONLines:
		return m.loadJSONLines(r)
	}
	return 0, fmt.Errorf("restore: unknown scope map format %q (want csv or jsonl)", f)
}

// skipBOM drops a UTF-8 byte order mark at the start of r: editors and spreadsheet
// exports write one, and it is no part of the first scope.
func skipBOM(r io.Reader) io.Reader {
	br := bufio.NewReaderSize(r, 256<<10)
	if b, err := br.Peek(3); err == nil && bytes.Equal(b, []byte{0xEF, 0xBB, 0xBF}) {
		_, _ = br.Discard(3)
	}
	return br
}

func (m *Mapper) loadCSV(r io.Reader) (int, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1 // checked here, with a clearer message
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.ReuseRecord = true
	n := 0
	for first := true; ; first = false {
		rec, err := cr.Read()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return n, &MapError{Line: pe.Line, Err: pe.Err}
			}
			return n, fmt.Errorf("reading scope map: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != 2 {
			return n, &MapError{Line: line, Err: fmt.Errorf("has %d fields, want 2 (from,to)", len(rec))}
		}
		// The csv package builds one string per record and slices the fields from
		// it, so from and to share an allocation.
		from, to := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if first && strings.EqualFold(from, "from") && strings.EqualFold(to, "to") {
			continue
		}
		if err := m.addChecked(from, to); err != nil {
			return n, &MapError{Line: line, Err: err}
		}
		n++
	}
}

func (m *Mapper) loadJSONLines(r io.Reader) (int, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMapLine)
	n, line := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var e struct {
			From *string `json:"from"`
			To   *string `json:"to"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return n, &MapError{Line: line, Err: fmt.Errorf("not a {\"from\": ..., \"to\": ...} object: %v", err)}
		}
		if dec.More() {
			return n, &MapError{Line: line, Err: errors.New("data after the JSON object")}
		}
		if e.From == nil || e.To == nil {
			return n, &MapError{Line: line, Err: errors.New(`needs both "from" and "to"`)}
		}
		both := *e.From + *e.To
		if err := m.addChecked(both[:len(*e.From)], both[len(*e.From):]); err != nil {
			return n, &MapError{Line: line, Err: err}
		}
		n++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return n, &MapError{Line: line + 1, Err: fmt.Errorf("longer than %d bytes", maxMapLine)}
		}
		return n, fmt.Errorf("reading scope map: %w", err)
	}
	return n, nil
}

// addChecked normalises, validates and adds an entry whose strings are already
// compact (normalising an NFC string returns it: no copy).
func (m *Mapper) addChecked(from, to string) error {
	from, to = memory.NormalizeScope(from), memory.NormalizeScope(to)
	if err := memory.ValidateScope(from); err != nil {
		return fmt.Errorf("from: %w", err)
	}
	if err := memory.ValidateScope(to); err != nil {
		return fmt.Errorf("to: %w", err)
	}
	return m.addExact(from, to)
}
