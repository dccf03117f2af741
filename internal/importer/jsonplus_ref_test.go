package importer

// The decoder as it was before it read strings through a scratch buffer, decoded
// extension payloads in place and dropped message metadata: the reference the fuzz
// test holds the faster one to.

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// refDecodeJSONPlus(b, true) decodes whole, then deletes droppedMessageKeys from
// every LangChain message: what decodeJSONPlus(b, true) must give whenever this
// succeeds.
func refDecodeJSONPlus(b []byte, messages bool) (any, error) {
	if len(b) > maxBlob {
		return nil, fmt.Errorf("msgpack value of %d bytes is over the %d-byte limit", len(b), maxBlob)
	}
	d := msgpack.NewDecoder(bytes.NewReader(b))
	w := refWalker{d: d, remaining: len(b), messages: messages}
	v, err := w.value(0)
	if err != nil {
		return nil, err
	}
	if _, err := d.PeekCode(); err != io.EOF {
		return nil, errors.New("msgpack value has trailing bytes")
	}
	return v, nil
}

type refWalker struct {
	d *msgpack.Decoder
	// remaining bounds preallocation by what the input can still hold.
	remaining int
	messages  bool
}

func (w *refWalker) value(depth int) (any, error) {
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
		n, err := w.d.DecodeBytesLen()
		if err != nil {
			return nil, err
		}
		if n > w.remaining {
			return nil, fmt.Errorf("msgpack string of %d bytes in %d", n, w.remaining)
		}
		b := make([]byte, max(n, 0))
		err = w.d.ReadFull(b)
		return string(b), err
	case msgpcode.IsBin(c):
		// (Bounded first since the fuzz test: an overlong length fails as before,
		// without growing a buffer to the end of the input.)
		n, err := w.d.DecodeBytesLen()
		if err != nil {
			return nil, err
		}
		if n > w.remaining {
			return nil, fmt.Errorf("msgpack bin of %d bytes in %d", n, w.remaining)
		}
		b := make([]byte, max(n, 0))
		err = w.d.ReadFull(b)
		if err != nil {
			return nil, err
		}
		return base64.StdEncoding.EncodeToString(b), nil
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return w.array(depth)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return w.object(depth)
	case msgpcode.IsExt(c):
		return w.ext(depth)
	}
	return nil, fmt.Errorf("msgpack: unexpected code 0x%02x", c)
}

// scalar is the decoder's own (unchanged since).
func (w *refWalker) scalar(c byte) (any, bool, error) {
	return (&walker{d: w.d}).scalar(c)
}

func (w *refWalker) array(depth int) (any, error) {
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

func (w *refWalker) object(depth int) (any, error) {
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
		v, err := w.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
	return out, nil
}

func (w *refWalker) ext(depth int) (any, error) {
	id, n, err := w.d.DecodeExtHeader()
	if err != nil {
		return nil, err
	}
	if n > w.remaining {
		return nil, fmt.Errorf("msgpack extension of %d bytes in %d", n, w.remaining)
	}
	payload := make([]byte, n)
	if err := w.d.ReadFull(payload); err != nil {
		return nil, err
	}
	switch id {
	case extMsgpackTimestamp:
		var t time.Time
		if err := msgpack.Unmarshal(append(refExtHeader(id, n), payload...), &t); err != nil {
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
	inner := refWalker{d: msgpack.NewDecoder(bytes.NewReader(payload)), remaining: n, messages: w.messages}
	v, err := inner.value(depth + 1)
	if err != nil {
		return nil, err
	}
	tup, ok := v.([]any)
	if !ok || len(tup) < 3 {
		return nil, fmt.Errorf("msgpack extension %d: want [module, class, data, ...], got %T", id, v)
	}
	mod, _ := tup[0].(string)
	cls, _ := tup[1].(string)
	if m, ok := tup[2].(map[string]any); ok && w.messages && (id == extPydanticV2 || id == extPydanticV1) && strings.HasPrefix(mod, "langchain_core.messages") {
		for k := range droppedMessageKeys {
			delete(m, k)
		}
	}
	if id == extConstructorSingleArg && mod == "uuid" && cls == "UUID" {
		if hex, ok := tup[2].(string); ok && len(hex) == 32 {
			return hex[:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:], nil
		}
	}
	return tup[2], nil
}

// extHeader re-creates the header of an extension value, for msgpack's own
// timestamp decoding.
func refExtHeader(id int8, n int) []byte {
	switch n {
	case 4:
		return []byte{msgpcode.FixExt4, byte(id)}
	case 8:
		return []byte{msgpcode.FixExt8, byte(id)}
	}
	return []byte{msgpcode.Ext8, byte(n), byte(id)}
}
