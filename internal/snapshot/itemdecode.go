package snapshot

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
	return decodeItemJSON(line, it)
}

// itemLine is an item line as encoding/json reads and writes it: memory.Item, whose
// embedding is either form of the format (packedEmbedding).
type itemLine struct {
	*memory.Item
	Embedding packedEmbedding `json:"embedding,omitempty"` // hides Item.Embedding
}

// decodeItemJSON decodes line with encoding/json, the reference of unmarshalItem.
func decodeItemJSON(line []byte, it *memory.Item) error {
	l := itemLine{Item: it}
	if err := json.Unmarshal(line, &l); err != nil {
		return err
	}
	it.Embedding = l.Embedding
	return nil
}

// packedEmbedding is an item's embedding in either form a package may hold: an array
// of numbers (formats 1 to 3, and accepted in any) or, as format 4 writes it, a string
// holding the standard base64 of its float32 values in little-endian byte order
// (appendEmbedding).
type packedEmbedding []float32

func (e packedEmbedding) MarshalJSON() ([]byte, error) { return appendEmbedding(nil, e) }

func (e *packedEmbedding) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		var v []float32
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*e = v
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := decodeEmbeddingBase64(make([]float32, 0, len(s)*3/16), []byte(s))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// decodeEmbeddingBase64 appends to dst the float32 values whose little-endian bytes
// b64 holds in standard, padded base64. A length that is not a whole number of values,
// and values that are not finite (which a JSON number cannot be either), are refused.
func decodeEmbeddingBase64(dst []float32, b64 []byte) ([]float32, error) {
	var stack [4096]byte
	raw := stack[:0]
	if n := base64.StdEncoding.DecodedLen(len(b64)); n > len(stack) {
		raw = make([]byte, 0, n)
	}
	raw, err := base64.StdEncoding.AppendDecode(raw, b64)
	if err != nil {
		return dst, fmt.Errorf("embedding: not base64: %w", err)
	}
	if len(raw)%4 != 0 {
		return dst, fmt.Errorf("embedding: %d bytes are not a whole number of float32 values (4 bytes each)", len(raw))
	}
	dst = slices.Grow(dst, len(raw)/4)
	for i := 0; i < len(raw); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(raw[i:]))
		if f := float64(x); math.IsInf(f, 0) || math.IsNaN(f) {
			return dst, fmt.Errorf("embedding: element %d is %v (must be finite)", i/4, x)
		}
		dst = append(dst, x)
	}
	return dst, nil
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
	if sc.Next() == '"' {
		var buf [8192]byte
		b64, ok := sc.String(buf[:0])
		if !ok {
			return false
		}
		vec, err := decodeEmbeddingBase64(make([]float32, 0, len(b64)*3/16), b64)
		if err != nil {
			return false // decodeItemJSON words the error
		}
		*dst = vec
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
