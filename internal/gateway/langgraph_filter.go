package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// LangGraph's search filter, with the semantics of LangGraph's own InMemoryStore
// (langgraph/store/memory, _compare_values and _apply_operator), in JSON's terms:
//
//   - {"field": v} compares the value's top-level field (a missing field is null);
//   - an object without operators matches an object holding at least those fields,
//     each compared the same way, at any depth ({"profile": {"city": "Beijing"}});
//   - a list matches a list of the same length, element by element;
//   - a scalar matches an equal scalar; numbers compare as numbers (1 = 1.0, exactly,
//     at any size), never as text;
//   - an object whose keys start with "$" is operators, all of which must hold: $eq
//     and $ne (whole-value equality), $gt $gte $lt $lte (numbers with numbers, strings
//     with strings in code point order; anything else does not match), and $in and
//     $nin (equal to one of / none of a list).
//
// An unknown operator, an object mixing operators and fields, a malformed operand
// or a NUL anywhere is refused (422): a filter never silently matches nothing.

// lgFilter is a compiled filter; nil matches everything.
type lgFilter func(doc map[string]any) bool

// compileFilter compiles a search's filter (raw: a JSON object, or absent).
func compileFilter(raw json.RawMessage) (lgFilter, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	v, err := decodeJSONNumbers(raw)
	if err != nil {
		return nil, filterErr("filter: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, filterErr("filter must be a JSON object of fields")
	}
	if len(obj) == 0 {
		return nil, nil
	}
	m, err := compileFields(obj, "filter")
	if err != nil {
		return nil, err
	}
	return func(doc map[string]any) bool { return m(doc) }, nil
}

func filterErr(format string, args ...any) error {
	return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, format, args...)
}

// matcher judges one value of a document (nil: null or missing).
type matcher func(v any) bool

// compileFields matches an object holding the fields, each as compileValue says.
func compileFields(obj map[string]any, path string) (matcher, error) {
	type field struct {
		name string
		m    matcher
	}
	fields := make([]field, 0, len(obj))
	for name, fv := range obj {
		if err := memory.CheckText(name); err != nil {
			return nil, filterErr("%s: field name %q %v", path, name, err)
		}
		m, err := compileValue(fv, path+"."+name)
		if err != nil {
			return nil, err
		}
		fields = append(fields, field{name, m})
	}
	return func(v any) bool {
		doc, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for _, f := range fields {
			if !f.m(doc[f.name]) {
				return false
			}
		}
		return true
	}, nil
}

// compileValue compiles what one field is compared with.
func compileValue(fv any, path string) (matcher, error) {
	switch x := fv.(type) {
	case string:
		if err := memory.CheckText(x); err != nil {
			return nil, filterErr("%s: %v", path, err) // stored content never holds it
		}
	case map[string]any:
		ops := 0
		for k := range x {
			if strings.HasPrefix(k, "$") {
				ops++
			}
		}
		switch {
		case ops == 0:
			return compileFields(x, path)
		case ops < len(x):
			return nil, filterErr("%s mixes operators and fields; put the fields in their own object", path)
		}
		return compileOps(x, path)
	case []any:
		elems := make([]matcher, len(x))
		for i, e := range x {
			m, err := compileValue(e, path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			elems[i] = m
		}
		return func(v any) bool {
			list, ok := v.([]any)
			if !ok || len(list) != len(elems) {
				return false
			}
			for i, m := range elems {
				if !m(list[i]) {
					return false
				}
			}
			return true
		}, nil
	}
	return func(v any) bool { return jsonEqual(v, fv) }, nil
}

// compileOps compiles an object of operators, all of which must hold.
func compileOps(ops map[string]any, path string) (matcher, error) {
	names := make([]string, 0, len(ops))
	for k := range ops {
		names = append(names, k)
	}
	slices.Sort(names) // errors name the same operator every time
	var ms []matcher
	for _, op := range names {
		want := ops[op]
		if err := checkNoNUL(want, path+"."+op); err != nil {
			return nil, err
		}
		var m matcher
		switch op {
		case "$eq":
			m = func(v any) bool { return jsonEqual(v, want) }
		case "$ne":
			m = func(v any) bool { return !jsonEqual(v, want) }
		case "$gt", "$gte", "$lt", "$lte":
			switch want.(type) {
			case json.Number, string:
			default:
				return nil, filterErr("%s: %s needs a number or a string, got %s", path, op, operand(want))
			}
			m = orderOp(op, want)
		case "$in", "$nin":
			list, ok := want.([]any)
			if !ok {
				return nil, filterErr("%s: %s needs a list, got %s", path, op, operand(want))
			}
			in := func(v any) bool {
				return slices.ContainsFunc(list, func(w any) bool { return jsonEqual(v, w) })
			}
			if op == "$in" {
				m = in
			} else {
				m = func(v any) bool { return !in(v) }
			}
		default:
			return nil, filterErr("%s: unsupported operator %s (supported: $eq $ne $gt $gte $lt $lte $in $nin)", path, op)
		}
		ms = append(ms, m)
	}
	return func(v any) bool {
		for _, m := range ms {
			if !m(v) {
				return false
			}
		}
		return true
	}, nil
}

// orderOp is $gt, $gte, $lt or $lte against want.
func orderOp(op string, want any) matcher {
	return func(v any) bool {
		c, ok := jsonOrder(v, want)
		switch {
		case !ok:
			return false
		case op == "$gt":
			return c > 0
		case op == "$gte":
			return c >= 0
		case op == "$lt":
			return c < 0
		}
		return c <= 0
	}
}

// checkNoNUL refuses a NUL in any string of a filter value (stored content never holds
// one, see memory.CheckText).
func checkNoNUL(v any, path string) error {
	switch x := v.(type) {
	case string:
		if err := memory.CheckText(x); err != nil {
			return filterErr("%s: %v", path, err)
		}
	case []any:
		for _, e := range x {
			if err := checkNoNUL(e, path); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, e := range x {
			if err := memory.CheckText(k); err != nil {
				return filterErr("%s: field name %q %v", path, k, err)
			}
			if err := checkNoNUL(e, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// operand shows an operand in an error, shortened.
func operand(v any) string {
	b, _ := json.Marshal(v) // decoded JSON: cannot fail
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// decodeJSONNumbers decodes JSON keeping numbers as json.Number, so that they compare
// exactly (see numCompare).
func decodeJSONNumbers(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// matches applies the filter to a memory's content.
func (f lgFilter) matches(content json.RawMessage) bool {
	if f == nil {
		return true
	}
	v, err := decodeJSONNumbers(content)
	if err != nil {
		return false
	}
	doc, ok := v.(map[string]any)
	return ok && f(doc)
}

// jsonEqual is JSON value equality, numbers by value.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		c, ok := numCompare(x, y)
		return ok && c == 0
	case []any:
		y, ok := b.([]any)
		return ok && slices.EqualFunc(x, y, jsonEqual)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

// jsonOrder compares two numbers or two strings; false for anything else.
func jsonOrder(a, b any) (int, bool) {
	switch x := a.(type) {
	case json.Number:
		if y, ok := b.(json.Number); ok {
			return numCompare(x, y)
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), true // UTF-8 byte order is code point order
		}
	}
	return 0, false
}

// numCompare compares two JSON numbers by value, as Python compares the int and
// float json.loads makes of them: integers exactly at any size, fractions and
// exponents as float64 (out of range: ±Inf), an integer with a float exactly.
func numCompare(a, b json.Number) (int, bool) {
	x, okx := parseNum(a)
	y, oky := parseNum(b)
	if !okx || !oky {
		return 0, false
	}
	return x.Cmp(y), true
}

// parseNum reads a JSON number: an integer literal exactly, anything else as the
// float64 it rounds to.
func parseNum(n json.Number) (*big.Float, bool) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		i, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, false
		}
		return new(big.Float).SetPrec(uint(max(64, i.BitLen()))).SetInt(i), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRange(err) {
		return nil, false
	}
	return new(big.Float).SetFloat64(f), true // ±Inf on overflow, as Python's float()
}

func isRange(err error) bool { return errors.Is(err, strconv.ErrRange) }
