package gateway

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestLangGraphFilterSemantics: LangGraph's filter as its InMemoryStore defines it,
// in JSON's terms: nested objects match partially at any depth, lists element by
// element, a missing field is null, numbers compare as numbers (exactly, at any
// size), and the operators $eq $ne $gt $gte $lt $lte $in $nin. What cannot be a
// filter is refused, never silently matches nothing.
func TestLangGraphFilterSemantics(t *testing.T) {
	doc := json.RawMessage(`{"kind":"pref","n":3,"tags":["a","b"],"nested":{"x":1},"flag":true,
		"profile":{"city":"Beijing","age":30,"langs":["zh","en"]},
		"items":[{"a":1,"b":2}],"big":12345678901234567891,"f":0.1,"none":null,"ten":10,"word":"b"}`)
	for filter, want := range map[string]bool{
		`{}`:                       true,
		`{"kind":"pref"}`:          true,
		`{"kind":"fact"}`:          false,
		`{"n":3}`:                  true,
		`{"n":3.0}`:                true,
		`{"n":3e0}`:                true,
		`{"n":{"$gt":2,"$lte":3}}`: true,
		`{"n":{"$gt":2.5}}`:        true,
		`{"n":{"$lt":3}}`:          false,
		`{"n":{"$ne":4}}`:          true,
		`{"ten":{"$gt":9}}`:        true, // as numbers; as text "10" < "9"
		`{"ten":{"$lt":9}}`:        false,
		`{"kind":{"$gte":"p"}}`:    true,
		`{"word":{"$lt":"ba"}}`:    true,
		`{"missing":1}`:            false,
		`{"missing":null}`:         true, // a missing field is null, as value.get(k) in Python
		`{"none":null}`:            true,
		`{"missing":{"$ne":1}}`:    true,
		`{"missing":{"$gt":1}}`:    false, // nothing to compare (InMemoryStore raises instead)
		`{"tags":["a","b"]}`:       true,
		`{"tags":["a"]}`:           false, // lists: same length, element by element
		`{"tags":["b","a"]}`:       false,
		`{"nested":{"x":1}}`:       true,
		`{"nested":{"x":2}}`:       false,
		`{"n":{"$gt":"a string"}}`: false,
		// Nested filters match partially, at any depth.
		`{"profile":{"city":"Beijing"}}`:                                        true,
		`{"profile":{"city":"Shanghai"}}`:                                       false,
		`{"profile":{"city":"Beijing","age":30}}`:                               true,
		`{"profile":{"age":{"$gte":30,"$lt":31}}}`:                              true,
		`{"profile":{"langs":["zh","en"]}}`:                                     true,
		`{"profile":{"zip":null}}`:                                              true,
		`{"profile":"Beijing"}`:                                                 false,
		`{"kind":{"city":"Beijing"}}`:                                           false,
		`{"items":[{"a":1}]}`:                                                   true, // elements compared as filters too
		`{"items":[{"a":2}]}`:                                                   false,
		`{"profile":{"$eq":{"city":"Beijing"}}}`:                                false, // $eq is whole-value equality
		`{"profile":{"$eq":{"langs":["zh","en"],"age":30.0,"city":"Beijing"}}}`: true,
		`{"profile":{"$ne":{"city":"Beijing"}}}`:                                true,
		// $in and $nin.
		`{"kind":{"$in":["fact","pref"]}}`:     true,
		`{"kind":{"$in":["fact"]}}`:            false,
		`{"kind":{"$nin":["pref"]}}`:           false,
		`{"kind":{"$nin":["fact","x"]}}`:       true,
		`{"n":{"$in":[1,2,3.0]}}`:              true,
		`{"missing":{"$in":[null]}}`:           true,
		`{"missing":{"$nin":["x"]}}`:           true,
		`{"tags":{"$in":[["a","b"]]}}`:         true,
		`{"kind":{"$in":[]}}`:                  false,
		`{"kind":{"$nin":[]}}`:                 true,
		`{"n":{"$in":[3],"$nin":[4],"$gt":1}}`: true,
		// Numbers exactly: beyond float64, and a fraction against an integer.
		`{"big":12345678901234567891}`:         true,
		`{"big":12345678901234567890}`:         false,
		`{"big":{"$gt":12345678901234567890}}`: true,
		`{"f":0.1}`:                            true,
		`{"f":{"$lt":1}}`:                      true,
		// JSON types stay apart (Python's True == 1 does not carry over).
		`{"flag":1}`:    false,
		`{"flag":true}`: true,
	} {
		f, err := compileFilter(json.RawMessage(filter))
		if err != nil {
			t.Errorf("filter %s: %v", filter, err)
			continue
		}
		if got := f.matches(doc); got != want {
			t.Errorf("filter %s = %v, want %v", filter, got, want)
		}
	}
	for _, bad := range []string{
		`[]`, `"x"`, `1`,
		`{"n":{"$regex":"x"}}`,
		`{"n":{"$gt":1,"x":2}}`,
		`{"n":{"$in":"not a list"}}`,
		`{"n":{"$nin":{"a":1}}}`,
		`{"n":{"$gt":[1]}}`,
		`{"n":{"$gt":null}}`,
		`{"n":{"$lte":true}}`,
		`{"profile":{"age":{"$between":[1,2]}}}`,
		`{"k":"a\u0000b"}`,
		`{"a\u0000":1}`,
		`{"k":{"$in":["\u0000"]}}`,
		`{"k":{"x":{"\u0000":1}}}`,
		`{"k":[1,{"$eq":"\u0000"}]}`,
	} {
		if _, err := compileFilter(json.RawMessage(bad)); err == nil {
			t.Errorf("filter %s was accepted", bad)
		} else if ae, ok := err.(*apiError); !ok || ae.status != 422 {
			t.Errorf("filter %s: %v, want a 422", bad, err)
		}
	}
}

// TestGuaranteeLangGraphFiltersThroughTheAPI: the filters of issue 20 through the Store API,
// with and without a query: nested fields and $in/$nin select what they say, numbers
// compare as numbers, and a filter that is not one is a 422.
func TestGuaranteeLangGraphFiltersThroughTheAPI(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	for key, v := range map[string]string{
		"ann":  `{"name":"Ann","profile":{"city":"Beijing","age":31},"tag":"family","n":9}`,
		"bo":   `{"name":"Bo","profile":{"city":"Shanghai","age":45},"tag":"work","n":10}`,
		"cy":   `{"name":"Cy","profile":{"city":"Beijing","age":52},"tag":"friend","n":100}`,
		"dee":  `{"name":"Dee","tag":"family","n":2.5}`,
		"eli":  `{"name":"Eli","profile":{"city":"Beijing"},"tag":"work"}`,
		"fern": `{"name":"Fern","profile":"Beijing","tag":"other","n":"11"}`,
	} {
		e.must(204, k.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "people"}, "key": key, "value": json.RawMessage(v)}, nil)
	}
	keys := func(filter string, query string) string {
		t.Helper()
		body := map[string]any{"namespace_prefix": []string{"memories", "u1"}, "filter": json.RawMessage(filter), "limit": 50}
		if query != "" {
			body["query"] = query
		}
		var sr lgSearchResponse
		e.must(200, k.plain, "POST", "/store/items/search", body, &sr)
		var out []string
		for _, it := range sr.Items {
			out = append(out, it.Key)
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	for _, tc := range []struct{ filter, want string }{
		{`{"profile":{"city":"Beijing"}}`, "ann,cy,eli"},
		{`{"profile":{"city":"Beijing","age":{"$gt":40}}}`, "cy"},
		{`{"tag":{"$in":["family","friend"]}}`, "ann,cy,dee"},
		{`{"tag":{"$nin":["family","friend"]}}`, "bo,eli,fern"},
		{`{"n":{"$gt":9}}`, "bo,cy"},               // numbers, not text: 10 and 100 > 9; "11" is a string
		{`{"n":{"$gte":2.5,"$lt":10}}`, "ann,dee"}, // 9 and 2.5
		{`{"n":10.0}`, "bo"},
		{`{"profile":{"age":null}}`, "eli"},
	} {
		for _, q := range []string{"", "people in Beijing"} {
			if got := keys(tc.filter, q); got != tc.want {
				t.Errorf("filter %s (query %q): %s, want %s", tc.filter, q, got, tc.want)
			}
		}
	}
	for _, bad := range []string{`{"tag":{"$regex":"fam"}}`, `{"tag":{"$in":"family"}}`, `{"tag":{"$eq":"x","y":1}}`} {
		e.wantError(422, CodeInvalidRequest, k.plain, "POST", "/store/items/search",
			map[string]any{"namespace_prefix": []string{"memories", "u1"}, "filter": json.RawMessage(bad)})
	}
}
