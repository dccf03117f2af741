// Package importer converts agent memory held by other frameworks (LangGraph
// checkpointers and stores, LangChain chat histories, Letta agent files) into memory
// items for the restore engine. Readers know each source's layout; the conversion
// rules (identity, selection, turns into memories) are shared. Nothing here writes to
// a store, and formats the importer does not understand are reported, never guessed.
package importer

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrUnsupported marks data the importer does not understand (pickle, encrypted
// serializers, DeltaChannel snapshots, numpy arrays, unknown extension types): the
// unit holding it is reported as unsupported, never imported half-read.
var ErrUnsupported = errors.New("unsupported format")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// LangGraph's JsonPlusSerializer writes msgpack with these extension types (each
// payload is itself msgpack, usually [module, class, data, (method)]); see
// research/importers.md 1.2.
const (
	extConstructorSingleArg = 0 // UUID, Decimal, set, Enum, ...: [mod, cls, arg]
	extConstructorPosArgs   = 1 // Path, timedelta, date, Send: [mod, cls, [args]]
	extConstructorKwArgs    = 2 // namedtuple, dataclass, store Item: [mod, cls, {kwargs}]
	extMethodSingleArg      = 3 // datetime: [mod, cls, iso, "fromisoformat"]
	extPydanticV1           = 4 // [mod, cls, dict]
	extPydanticV2           = 5 // LangChain messages: [mod, cls, model_dump(), method]
	extNumpyArray           = 6
	extDeltaSnapshot        = 7 // DeltaChannel (beta): the state must be replayed from writes
	extMsgpackTimestamp     = -1
)

// Decoding limits: a corrupt or hostile blob fails with an error instead of
// exhausting memory or the stack.
const (
	maxDepth = 200
	// maxBlob bounds one decoded blob (a thread's whole message list).
	maxBlob = 256 << 20
)

// DecodeJSONPlus decodes one JsonPlusSerializer "msgpack" value into plain values
// that encoding/json writes as JSON: maps with string keys, slices, strings, numbers,
// booleans and nil. Extension values become what LangGraph's own msgpack-to-JSON
// reviver gives (a LangChain message becomes its model_dump() dict, a datetime its
// ISO string, a UUID its dashed form). It refuses what it cannot represent
// faithfully with an error wrapping ErrUnsupported.
func DecodeJSONPlus(b []byte) (any, error) {
	return decodeJSONPlus(b, false)
}

// decodeJSONPlus is DecodeJSONPlus; messages leaves out, of every LangChain message,
// what messageContent never keeps (its provider's response_metadata and
// usage_metadata, a quarter of a message's bytes): skipped unread, so that what they
// hold, even what the importer cannot represent, never fails or costs the import.
func decodeJSONPlus(b []byte, messages bool) (any, error) {
	if len(b) > maxBlob {
		return nil, fmt.Errorf("msgpack value of %d bytes is over the %d-byte limit", len(b), maxBlob)
	}
	r := bytes.NewReader(b)
	w := walker{d: msgpack.NewDecoder(r), r: r, remaining: len(b), messages: messages}
	v, err := w.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := w.d.PeekCode(); err != io.EOF {
		return nil, errors.New("msgpack value has trailing bytes")
	}
	return v, nil
}

// walker decodes one value. The decoder reads r directly (a bytes.Reader is a
// ByteScanner, so msgpack does not buffer it): r.Len() is where the decoder is, which
// lets an extension's payload be decoded in place and measured.
type walker struct {
	d *msgpack.Decoder
	r *bytes.Reader
	// remaining bounds preallocation by what the input can still hold.
	remaining int
	messages  bool
	// scratch receives strings before they become Go strings; small holds the short
	// ones already seen (keys, types, names), boxed once.
	scratch []byte
	small   map[string]any
}

// droppedMessageKeys are the keys of a LangChain message decodeJSONPlus leaves out
// when decoding messages.
var droppedMessageKeys = map[string]bool{"response_metadata": true, "usage_metadata": true}

// maxSmall is the longest string small keeps, and maxSmallEntries how many.
const (
	maxSmall        = 32
	maxSmallEntries = 4096
)

func (w *walker) value(depth int) (any, error) {
	return w.valueOf(depth, false)
}

// valueOf decodes the next value; message says it is a LangChain message's dict.
func (w *walker) valueOf(depth int, message bool) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("msgpack value nested deeper than %d", maxDepth)
	}
	c, err := w.d.PeekCode()
	if err != nil {
		return nil, fmt.Errorf("msgpack: %w", err)
	}
	if v, ok, err := w.scalar(c); ok || err != nil {
		return v, err
	}
	switch {
	case msgpcode.IsString(c):
		return w.str()
	case msgpcode.IsBin(c):
		b, err := w.bytes()
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case isArray(c):
		return w.array(depth)
	case isMap(c):
		return w.object(depth, message)
	case msgpcode.IsExt(c):
		return w.ext(depth)
	}
	return nil, fmt.Errorf("msgpack: unexpected code 0x%02x", c)
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool { return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 }

// bytes reads the next string or bin into scratch (valid until the next call), its
// length bounded by what the input still holds before anything is allocated.
func (w *walker) bytes() ([]byte, error) {
	n, err := w.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if limit := min(w.remaining, w.r.Len()); n > limit {
		return nil, fmt.Errorf("msgpack string of %d bytes in %d", n, limit)
	}
	n = max(n, 0)
	if cap(w.scratch) < n {
		w.scratch = make([]byte, n)
	}
	b := w.scratch[:n]
	return b, w.d.ReadFull(b)
}

// str decodes a string through scratch, so that a short one seen before costs no
// allocation, and another costs one.
func (w *walker) str() (any, error) {
	b, err := w.bytes()
	if err != nil {
		return nil, err
	}
	n := len(b)
	if n == 0 {
		return "", nil
	}
	if n > maxSmall {
		return string(b), nil
	}
	if v, ok := w.small[string(b)]; ok {
		return v, nil
	}
	var v any = string(b)
	if w.small == nil {
		w.small = make(map[string]any, 64)
	}
	if len(w.small) < maxSmallEntries {
		w.small[v.(string)] = v
	}
	return v, nil
}

// scalar decodes nil, booleans and numbers (ok false for any other code).
func (w *walker) scalar(c byte) (any, bool, error) {
	var (
		v   any
		err error
	)
	switch {
	case c == msgpcode.Nil:
		err = w.d.DecodeNil()
	case c == msgpcode.True || c == msgpcode.False:
		v, err = w.d.DecodeBool()
	case msgpcode.IsFixedNum(c) || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64:
		v, err = w.d.DecodeInt64()
	case c == msgpcode.Uint8 || c == msgpcode.Uint16 || c == msgpcode.Uint32 || c == msgpcode.Uint64:
		v, err = w.d.DecodeUint64()
	case c == msgpcode.Float || c == msgpcode.Double:
		var f float64
		if f, err = w.d.DecodeFloat64(); err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
			err = unsupported("a non-finite number (%v) has no JSON form", f)
		}
		v = f
	default:
		return nil, false, nil
	}
	return v, true, err
}

func (w *walker) array(depth int) (any, error) {
	n, err := w.d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, nil
	}
	if n > w.remaining {
		return nil, fmt.Errorf("msgpack array of %d elements in %d bytes", n, w.remaining)
	}
	out := make([]any, 0, min(n, 1024)) // grown as elements really decode
	for range n {
		v, err := w.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (w *walker) object(depth int, message bool) (any, error) {
	n, err := w.d.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, nil
	}
	if n > w.remaining {
		return nil, fmt.Errorf("msgpack map of %d entries in %d bytes", n, w.remaining)
	}
	out := make(map[string]any, min(n, 1024))
	for range n {
		k, err := w.value(depth + 1)
		if err != nil {
			return nil, err
		}
		var key string
		switch kk := k.(type) {
		case string:
			key = kk
		case int64:
			key = strconv.FormatInt(kk, 10) // OPT_NON_STR_KEYS: JSON keys are strings
		case uint64:
			key = strconv.FormatUint(kk, 10)
		case bool:
			key = strconv.FormatBool(kk)
		default:
			return nil, unsupported("a map key of type %T", k)
		}
		if message && droppedMessageKeys[key] {
			if err := w.skip(depth + 1); err != nil {
				return nil, err
			}
			continue
		}
		v, err := w.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	return out, nil
}

// skip reads past the next value without decoding it, as deep as value would go.
func (w *walker) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("msgpack value nested deeper than %d", maxDepth)
	}
	c, err := w.d.PeekCode()
	if err != nil {
		return fmt.Errorf("msgpack: %w", err)
	}
	n := 0
	switch {
	case isArray(c):
		n, err = w.d.DecodeArrayLen()
	case isMap(c):
		n, err = w.d.DecodeMapLen()
		n *= 2
	case msgpcode.IsExt(c):
		var size int
		if _, size, err = w.d.DecodeExtHeader(); err != nil {
			return err
		}
		if size > w.r.Len() {
			return fmt.Errorf("msgpack extension of %d bytes in %d", size, w.r.Len())
		}
		_, err = w.r.Seek(int64(size), io.SeekCurrent)
		return err
	default:
		return w.d.Skip() // a scalar, string or bin: nothing nested
	}
	if err != nil {
		return err
	}
	if n > w.remaining {
		return fmt.Errorf("msgpack container of %d values in %d bytes", n, w.remaining)
	}
	for range n {
		if err := w.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) ext(depth int) (any, error) {
	id, n, err := w.d.DecodeExtHeader()
	if err != nil {
		return nil, err
	}
	if n > w.remaining || n > w.r.Len() {
		return nil, fmt.Errorf("msgpack extension of %d bytes in %d", n, min(w.remaining, w.r.Len()))
	}
	switch id {
	case extMsgpackTimestamp:
		payload := make([]byte, n)
		if err := w.d.ReadFull(payload); err != nil {
			return nil, err
		}
		var t time.Time
		if err := msgpack.Unmarshal(append(extHeader(id, n), payload...), &t); err != nil {
			return nil, fmt.Errorf("msgpack timestamp: %w", err)
		}
		return t.UTC().Format(time.RFC3339Nano), nil
	case extNumpyArray:
		return nil, unsupported("a numpy array (extension %d)", id)
	case extDeltaSnapshot:
		return nil, unsupported("a DeltaChannel snapshot (extension %d, beta): the state lives in the checkpoint writes", id)
	case extConstructorSingleArg, extConstructorPosArgs, extConstructorKwArgs, extMethodSingleArg, extPydanticV1, extPydanticV2:
	default:
		return nil, unsupported("msgpack extension type %d", id)
	}
	// The payload is itself one msgpack value, decoded in place within its n bytes
	// (which bound what it may preallocate); bytes after it in the payload are
	// ignored, as a decoder of the payload alone would.
	end := w.r.Len() - n
	outer := w.remaining
	w.remaining = n
	tup, err := w.extTuple(id, depth+1)
	w.remaining = outer
	if err != nil {
		return nil, err
	}
	switch left := w.r.Len() - end; {
	case left < 0:
		return nil, fmt.Errorf("msgpack extension %d: its value runs past its %d-byte payload", id, n)
	case left > 0:
		if _, err := w.r.Seek(int64(left), io.SeekCurrent); err != nil {
			return nil, err
		}
	}
	mod, _ := tup[0].(string)
	cls, _ := tup[1].(string)
	if id == extConstructorSingleArg && mod == "uuid" && cls == "UUID" {
		if hex, ok := tup[2].(string); ok && len(hex) == 32 {
			return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], nil
		}
	}
	return tup[2], nil
}

// extTuple decodes an extension's payload, [module, class, data, ...]; the data of
// a LangChain message (a pydantic model of langchain_core.messages) is decoded as
// one when decoding messages.
func (w *walker) extTuple(id int8, depth int) ([]any, error) {
	c, err := w.d.PeekCode()
	if err != nil {
		return nil, fmt.Errorf("msgpack: %w", err)
	}
	if !isArray(c) {
		v, err := w.value(depth)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("msgpack extension %d: want [module, class, data, ...], got %T", id, v)
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("msgpack value nested deeper than %d", maxDepth)
	}
	n, err := w.d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n > w.remaining {
		return nil, fmt.Errorf("msgpack array of %d elements in %d bytes", n, w.remaining)
	}
	tup := make([]any, 0, min(n, 8))
	for i := range n {
		message := false
		if i == 2 && w.messages && (id == extPydanticV2 || id == extPydanticV1) {
			mod, _ := tup[0].(string)
			message = strings.HasPrefix(mod, "langchain_core.messages")
		}
		v, err := w.valueOf(depth+1, message)
		if err != nil {
			return nil, err
		}
		tup = append(tup, v)
	}
	if len(tup) < 3 {
		return nil, fmt.Errorf("msgpack extension %d: want [module, class, data, ...], got %T", id, tup)
	}
	return tup, nil
}

// extHeader re-creates the header of an extension value, for msgpack's own
// timestamp decoding.
func extHeader(id int8, n int) []byte {
	switch n {
	case 4:
		return []byte{msgpcode.FixExt4, byte(id)}
	case 8:
		return []byte{msgpcode.FixExt8, byte(id)}
	}
	return []byte{msgpcode.Ext8, byte(n), byte(id)}
}

// DecodeTyped decodes a (type, bytes) pair of JsonPlusSerializer.dumps_typed, as
// LangGraph stores checkpoint blobs and writes: msgpack and legacy json are read;
// null and empty are absent values (ok false); pickle and encrypted (+aes) types are
// refused.
func DecodeTyped(typ string, b []byte) (v any, ok bool, err error) {
	switch typ {
	case "msgpack":
		v, err = DecodeJSONPlus(b)
		return v, err == nil, err
	case "json":
		v, err = decodeLegacyJSON(b)
		return v, err == nil, err
	case "null", "empty", "":
		return nil, false, nil
	case "bytes", "bytearray":
		return base64.StdEncoding.EncodeToString(b), true, nil
	case "pickle":
		return nil, false, unsupported("a pickled value (pickle_fallback): the importer never unpickles")
	}
	if len(typ) > 4 && typ[len(typ)-4:] == "+aes" {
		return nil, false, unsupported("an encrypted value (%s, EncryptedSerializer)", typ)
	}
	return nil, false, unsupported("serializer type %q", typ)
}
