package importer

import "fmt"

// Pending writes. LangGraph saves what each task of a superstep writes as it finishes
// (checkpoint_writes, keyed by the superstep's input checkpoint) and makes the next
// checkpoint only when the whole superstep is done. A superstep that stopped part way
// (one branch called interrupt(), or raised, while a parallel branch had finished)
// leaves the finished branches' writes pending on the latest checkpoint, and
// get_state() shows the thread with them applied: the latest checkpoint's values,
// then each pending write through its channel's reducer, tasks in task-path order,
// a task's writes in order, skipping the __error__ and __interrupt__ writes. For the
// messages channel of MessagesState the reducer is add_messages; mergePending is it.

// removeAllMessages is the id of a RemoveMessage that clears the list
// (langgraph.graph.message.REMOVE_ALL_MESSAGES).
const removeAllMessages = "__remove_all__"

// mergePending applies pending writes to the messages channel as add_messages does: a
// message whose id the list holds replaces it, a RemoveMessage ("remove") of an id
// removes it, one of removeAllMessages clears the list of everything before it, and
// any other message is appended. A message written without an id gets a random one
// from LangGraph (get_state differs at every call); it is appended without one. A
// write that is not a message or list of messages, or that removes a message the list
// does not hold (LangGraph refuses it), makes the thread unsupported.
func mergePending(base []map[string]any, writes []encodedMessages, forImport bool) ([]map[string]any, error) {
	merged := append([]map[string]any(nil), base...)
	index := map[string]int{}
	for i, m := range merged {
		if id, ok := m["id"].(string); ok && id != "" {
			index[id] = i
		}
	}
	removed := map[string]bool{}
	for w, e := range writes {
		right, err := decodeWrite(e, forImport)
		if err != nil {
			return nil, unsupported("pending write %d to messages: %v", w, err)
		}
		// A RemoveMessage of every message keeps only what follows it in this write.
		for i := len(right) - 1; i >= 0; i-- {
			if right[i]["type"] == "remove" && right[i]["id"] == removeAllMessages {
				right = right[i+1:]
				merged, index, removed = nil, map[string]int{}, map[string]bool{}
				break
			}
		}
		for _, m := range right {
			id, _ := m["id"].(string)
			if i, ok := index[id]; ok && id != "" {
				if m["type"] == "remove" {
					removed[id] = true
				} else {
					delete(removed, id)
					merged[i] = m
				}
				continue
			}
			if m["type"] == "remove" {
				return nil, unsupported("pending write %d removes message %q, which the thread does not hold", w, id)
			}
			if id != "" {
				index[id] = len(merged)
			}
			merged = append(merged, m)
		}
	}
	if len(removed) > 0 {
		kept := merged[:0]
		for _, m := range merged {
			if id, _ := m["id"].(string); !removed[id] {
				kept = append(kept, m)
			}
		}
		merged = kept
	}
	return merged, nil
}

// decodeWrite decodes one pending write's value: a message, or a list of them.
func decodeWrite(e encodedMessages, forImport bool) ([]map[string]any, error) {
	var (
		v   any
		ok  bool
		err error
	)
	if e.typ == "msgpack" {
		v, err = decodeJSONPlus(e.blob, forImport)
		ok = err == nil
	} else {
		v, ok, err = DecodeTyped(e.typ, e.blob)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, nil // a null write
	}
	list, isList := v.([]any)
	if !isList {
		list = []any{v}
	}
	out := make([]map[string]any, 0, len(list))
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok || m["type"] == nil {
			return nil, fmt.Errorf("item %d is %T, not a LangChain message", i, x)
		}
		out = append(out, m)
	}
	return out, nil
}
