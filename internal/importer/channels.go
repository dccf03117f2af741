package importer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// State channels beyond messages. A LangGraph app's state often holds more than its
// conversation: a profile (a Pydantic model), preferences (a dataclass), a last-seen
// time, a set of tags. The importer reads every such channel of a thread's latest
// checkpoint; the ones a StateChannel rule names become one memory each, keyed in the
// thread's scope (their value decoded from JsonPlus as LangGraph's JSON reviver reads
// it); every other is counted and named in Stats.LeftOut, never dropped silently.
// LangGraph's own channels (__start__, __pregel_tasks, branch:to:agent, ...) are not
// state and not counted.

// StateChannel maps a state channel to a memory of each imported thread that holds it.
type StateChannel struct {
	// Channel is the state key, as the graph's state schema names it.
	Channel string `json:"channel"`
	// Type of the memory: semantic (default) or procedural.
	Type memory.Type `json:"type,omitempty"`
	// Key of the memory in the thread's scope (default: the channel's name). Of the
	// threads whose scope is one user's, the most recently active one's value is kept.
	Key string `json:"key,omitempty"`
}

// ValidateStateChannels checks rules: a channel named once, a type a channel can be.
func ValidateStateChannels(rules []StateChannel) error {
	seen := map[string]bool{}
	for i, r := range rules {
		switch {
		case !IsStateChannel(r.Channel):
			return fmt.Errorf("state channel %d: %q is not a state channel name (empty, messages, or LangGraph's own)", i, r.Channel)
		case seen[r.Channel]:
			return fmt.Errorf("state channel %q is mapped twice", r.Channel)
		case r.Type != "" && r.Type != memory.Semantic && r.Type != memory.Procedural:
			return fmt.Errorf("state channel %q: type %q (want semantic or procedural)", r.Channel, r.Type)
		}
		seen[r.Channel] = true
	}
	return nil
}

// IsStateChannel reports whether name is a state key of the graph beyond messages,
// not one of LangGraph's own channels (which start with "__" or hold a ':').
func IsStateChannel(name string) bool {
	return name != "" && name != "messages" && !strings.HasPrefix(name, "__") && !strings.Contains(name, ":")
}

// encodedChannel is one state channel's value as a reader found it: JSON inline in
// the checkpoint (a primitive), or a serializer's type and bytes.
type encodedChannel struct {
	name   string
	inline json.RawMessage
	typ    string
	blob   []byte
	value  any // already decoded (SQLite's checkpoints hold every value decoded)
	known  bool
}

func (c encodedChannel) decode() (any, bool, error) {
	switch {
	case c.known:
		return c.value, c.value != nil, nil
	case c.inline != nil:
		var v any
		if err := json.Unmarshal(c.inline, &v); err != nil {
			return nil, false, err
		}
		return v, v != nil, nil
	}
	return DecodeTyped(c.typ, c.blob)
}

// ChannelValues decodes the thread's state channels beyond messages (LangGraph's JSON
// reviver's view), by name; a channel whose value is None is absent.
func (t Thread) ChannelValues() (map[string]any, error) {
	out := map[string]any{}
	for _, c := range t.channels {
		v, ok, err := c.decode()
		if err != nil {
			return nil, fmt.Errorf("state channel %s: %w", c.name, err)
		}
		if ok {
			out[c.name] = v
		}
	}
	return out, nil
}

// channelMemories makes the memories of the channels rules map, and names the others
// the thread holds (sorted).
func (r Rules) channelMemories(t Thread, scope string) (items []memory.Item, leftOut []string, err error) {
	for _, c := range t.channels {
		i := slices.IndexFunc(r.StateChannels, func(sc StateChannel) bool { return sc.Channel == c.name })
		if i < 0 {
			if c.known && c.value == nil || c.typ == "null" || c.typ == "empty" || string(c.inline) == "null" {
				continue // no value: nothing left out
			}
			leftOut = append(leftOut, c.name)
			continue
		}
		v, ok, err := c.decode()
		if err != nil {
			return nil, nil, unsupported("state channel %s: %v", c.name, err)
		}
		if !ok {
			continue
		}
		rule := r.StateChannels[i]
		typ, key := rule.Type, rule.Key
		if typ == "" {
			typ = memory.Semantic
		}
		if key == "" {
			key = c.name
		}
		obj, isObj := v.(map[string]any)
		if !isObj {
			obj = map[string]any{"value": v}
		}
		content, err := marshalJSON(obj)
		if err != nil {
			return nil, nil, err
		}
		it := r.item(deterministicID("lgc", scope, key), typ, scope, content, t)
		it.Key = key
		items = append(items, it)
	}
	slices.Sort(leftOut)
	return items, leftOut, nil
}
