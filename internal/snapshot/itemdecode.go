package snapshot

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/amemory/memory-operator/internal/jsonscan"
	"github.com/amemory/memory-operator/internal/memory"
)

// unmarshalItem decodes one item line into it exactly as json.Unmarshal does, several
// times faster: a restore decodes every item of a package. A hand-written decoder
// handles the lines the format's writers produce (each field of memory.Item at most
// once, spelled as its tag); anything else (unknown or repeated fields, null where a
// value belongs, invalid JSON) goes to json.Unmarshal, which then decides and words
// the error. FuzzUnmarshalItem holds the two equal.
func unmarshalItem(line []byte, it *memory.Item) error {
	if decodeItemFast(line, it) {
		return nil
	}
	*it = memory.Item{}
	return json.Unmarshal(line, it)
}

// Bits for the fields seen, so a repeated field falls back.
const (
	fID = 1 << iota
	fType
	fScope
	fKey
	fContent
	fSource
	fScore
	fCreated
	fUpdated
	fExpires
	fArchived
	fHistory
	fEmbedding
	fRecorded
)

func decodeItemFast(line []byte, it *memory.Item) bool {
	sc := jsonscan.Scanner{Data: line}
	if !sc.Consume('{') {
		return false
	}
	var seen uint32
	var name []byte
	var buf [64]byte
	if sc.Consume('}') {
		return sc.AtEnd()
	}
	for {
		var ok bool
		if name, ok = sc.String(buf[:0]); !ok || !sc.Consume(':') {
			return false
		}
		bit, ok := itemField(string(name))
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if !decodeItemField(&sc, it, bit) {
			return false
		}
		if sc.Consume(',') {
			continue
		}
		return sc.Consume('}') && sc.AtEnd()
	}
}

// decodeItemField decodes the value of the field whose bit is given.
func decodeItemField(sc *jsonscan.Scanner, it *memory.Item, bit uint32) bool {
	switch bit {
	case fID:
		return decodeString(sc, &it.MemoryID)
	case fType:
		var s string
		ok := decodeString(sc, &s)
		it.MemoryType = memory.Type(s)
		return ok
	case fScope:
		return decodeString(sc, &it.Scope)
	case fKey:
		return decodeString(sc, &it.Key)
	case fSource:
		return decodeString(sc, &it.Source)
	case fContent:
		return decodeRaw(sc, &it.Content)
	case fScore:
		return decodeFloat(sc, &it.BaseScore)
	case fCreated:
		return decodeTime(sc, &it.CreatedAt)
	case fUpdated:
		return decodeTime(sc, &it.UpdatedAt)
	case fRecorded:
		return decodeTime(sc, &it.RecordedAt)
	case fExpires:
		return decodeTimePtr(sc, &it.ExpiresAt)
	case fArchived:
		return decodeTimePtr(sc, &it.ArchivedAt)
	case fHistory:
		return decodeHistory(sc, &it.History)
	case fEmbedding:
		return decodeEmbedding(sc, &it.Embedding)
	}
	return false
}

func itemField(name string) (uint32, bool) {
	switch name {
	case "memory_id":
		return fID, true
	case "memory_type":
		return fType, true
	case "scope":
		return fScope, true
	case "key":
		return fKey, true
	case "content":
		return fContent, true
	case "source":
		return fSource, true
	case "base_score":
		return fScore, true
	case "created_at":
		return fCreated, true
	case "updated_at":
		return fUpdated, true
	case "recorded_at":
		return fRecorded, true
	case "expires_at":
		return fExpires, true
	case "archived_at":
		return fArchived, true
	case "history":
		return fHistory, true
	case "embedding":
		return fEmbedding, true
	}
	return 0, false
}

func decodeString(sc *jsonscan.Scanner, dst *string) bool {
	if sc.Next() != '"' {
		return false // null leaves a string unchanged in encoding/json: let it decide
	}
	// Strings without escapes or non-ASCII bytes (nearly all) are taken as they are.
	start := sc.Pos + 1
	end := start
	for end < len(sc.Data) {
		b := sc.Data[end]
		if b == '"' {
			*dst = string(sc.Data[start:end])
			sc.Pos = end + 1
			return true
		}
		if b == '\\' || b < 0x20 || b >= 0x80 {
			break
		}
		end++
	}
	b, ok := sc.String(nil)
	*dst = string(b)
	return ok
}

// decodeRaw takes a JSON value's bytes as they are, as json.RawMessage does (null
// included, which the fast path leaves to encoding/json).
func decodeRaw(sc *jsonscan.Scanner, dst *json.RawMessage) bool {
	if sc.Next() == 'n' {
		return false
	}
	v, ok := sc.Value()
	if !ok {
		return false
	}
	*dst = append(json.RawMessage(nil), v...)
	return true
}

func decodeFloat(sc *jsonscan.Scanner, dst *float64) bool {
	lit, _, ok := sc.Number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	*dst = f
	return true
}

// decodeTime hands the quoted value to time.Time's own UnmarshalJSON, as
// encoding/json does.
func decodeTime(sc *jsonscan.Scanner, dst *time.Time) bool {
	if sc.Next() != '"' {
		return false
	}
	v, ok := sc.Value()
	return ok && dst.UnmarshalJSON(v) == nil
}

func decodeTimePtr(sc *jsonscan.Scanner, dst **time.Time) bool {
	if sc.Literal("null") {
		*dst = nil
		return true
	}
	t := new(time.Time)
	if !decodeTime(sc, t) {
		return false
	}
	*dst = t
	return true
}

func decodeHistory(sc *jsonscan.Scanner, dst *[]memory.Revision) bool {
	if sc.Literal("null") {
		*dst = nil
		return true
	}
	if !sc.Consume('[') {
		return false
	}
	hist := []memory.Revision{}
	if sc.Consume(']') {
		*dst = hist
		return true
	}
	for {
		var r memory.Revision
		if !decodeRevision(sc, &r) {
			return false
		}
		hist = append(hist, r)
		if sc.Consume(',') {
			continue
		}
		if !sc.Consume(']') {
			return false
		}
		*dst = hist
		return true
	}
}

func decodeRevision(sc *jsonscan.Scanner, r *memory.Revision) bool {
	if !sc.Consume('{') {
		return false
	}
	if sc.Consume('}') {
		return true
	}
	var seen uint32
	var buf [32]byte
	for {
		name, ok := sc.String(buf[:0])
		if !ok || !sc.Consume(':') {
			return false
		}
		var bit uint32
		switch string(name) {
		case "content":
			bit, ok = 1, decodeRaw(sc, &r.Content)
		case "source":
			bit, ok = 2, decodeString(sc, &r.Source)
		case "base_score":
			bit, ok = 4, decodeFloat(sc, &r.BaseScore)
		case "updated_at":
			bit, ok = 8, decodeTime(sc, &r.UpdatedAt)
		case "superseded_at":
			bit, ok = 16, decodeTime(sc, &r.SupersededAt)
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if sc.Consume(',') {
			continue
		}
		return sc.Consume('}')
	}
}

func decodeEmbedding(sc *jsonscan.Scanner, dst *[]float32) bool {
	if sc.Literal("null") {
		*dst = nil
		return true
	}
	if !sc.Consume('[') {
		return false
	}
	vec := make([]float32, 0, 64)
	if sc.Consume(']') {
		*dst = vec
		return true
	}
	for {
		lit, _, ok := sc.Number()
		if !ok {
			return false
		}
		f, err := strconv.ParseFloat(string(lit), 32)
		if err != nil {
			return false
		}
		vec = append(vec, float32(f))
		if sc.Consume(',') {
			continue
		}
		if !sc.Consume(']') {
			return false
		}
		*dst = vec
		return true
	}
}
