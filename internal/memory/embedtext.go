package memory

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
)

// EmbeddingText renders the item's content as stable, readable text for an embedding
// model: one "path: value" line per leaf, in sorted key order, nested objects flattened
// with dots and arrays of scalars joined with ", " (arrays holding objects or arrays
// are indexed: "steps.0.name"). When the item has a key, it is the root of every path,
// so {"city": "Berlin"} under key "address" becomes "address.city: Berlin".
// Strings are written without quotes; numbers in canonical form. The text depends only
// on the key and the meaning of the content, never on its formatting.
func (it Item) EmbeddingText() string {
	if text, ok := embeddingTextFast(it.Key, it.Content); ok {
		return text
	}
	return embeddingTextSlow(it.Key, it.Content)
}

// embeddingTextSlow is EmbeddingText through encoding/json: the definition, and what
// decides whenever the fast path does not.
func embeddingTextSlow(key string, content []byte) string {
	v, err := decodeJSON(content)
	if err != nil {
		// Validate rejects such items; fall back to the raw text rather than nothing.
		return strings.TrimSpace(key + " " + string(content))
	}
	var lines []string
	flattenText(key, v, &lines)
	if len(lines) == 0 {
		return key
	}
	return strings.Join(lines, "\n")
}

func flattenText(path string, v any, out *[]string) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			flattenText(join(k), x[k], out)
		}
	case []any:
		if len(x) == 0 {
			return
		}
		scalars := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := scalarText(e)
			if !ok {
				scalars = nil
				break
			}
			scalars = append(scalars, s)
		}
		if scalars != nil {
			*out = append(*out, leaf(path, strings.Join(scalars, ", ")))
			return
		}
		for i, e := range x {
			flattenText(join(strconv.Itoa(i)), e, out)
		}
	default:
		s, _ := scalarText(x)
		*out = append(*out, leaf(path, s))
	}
}

func leaf(path, value string) string {
	if path == "" {
		return value
	}
	return path + ": " + value
}

func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "null", true
	case bool:
		return strconv.FormatBool(x), true
	case string:
		return x, true
	case json.Number:
		if s, err := canonicalNumber(string(x)); err == nil {
			return s, true
		}
		return string(x), true
	}
	return "", false
}
