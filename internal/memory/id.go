package memory

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"time"
)

// idEncoding is base32 with the "extended hex" alphabet, lowercased: its characters
// sort in the same order as the bytes they encode, so IDs sort by creation time.
var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// NewID returns a new memory ID: 26 lowercase characters encoding a 48-bit Unix
// millisecond timestamp followed by 80 random bits. IDs created in different
// milliseconds sort by creation time; within one millisecond their order is random.
func NewID() string {
	return newIDAt(time.Now())
}

func newIDAt(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic("memory: crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	return idEncoding.EncodeToString(b[:])
}
