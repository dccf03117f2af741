package gateway

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
)

// Client-chosen memory IDs are made unique per scope at the door: the ID stored is
// the client's prefixed with a tag of its scope, "<tag>.<client id>". Two scopes can
// then never claim the same stored ID, so writing an ID that another scope uses
// answers exactly as writing an unused one (no existence oracle: a key learns nothing
// about other scopes), and a retry with the same client ID in the same scope is
// idempotent. An ID that already carries the caller's own tag (one the gateway
// returned) is kept as is, so echoing a returned ID back is idempotent too.
//
// IDs the gateway generates (memory.NewID) never contain a '.', so they never meet a
// tagged one; IDs that restores and importers bring are not touched.

// scopeTagLen is the length of a scope's tag, its separator included: 12 characters
// (60 bits) of the scope's SHA-256.
const scopeTagLen = 13

// MaxClientIDLen is the longest client-chosen memory_id: memory.MaxIDLen less the
// scope's tag.
const MaxClientIDLen = memory.MaxIDLen - scopeTagLen

// tagEncoding is lowercase base32hex: letters and digits, within the ID alphabet.
var tagEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// scopeTag is scope's tag with its separator.
func scopeTag(scope string) string {
	sum := sha256.Sum256([]byte("memory-operator/gateway/client-id\x00" + scope))
	return tagEncoding.EncodeToString(sum[:])[:scopeTagLen-1] + "."
}

// storedID is the memory_id a client-chosen id is stored under in scope.
func storedID(scope, id string) (string, error) {
	if err := memory.ValidateID(id); err != nil {
		return "", err
	}
	tag := scopeTag(scope)
	if strings.HasPrefix(id, tag) {
		return id, nil
	}
	if len(id) > MaxClientIDLen {
		return "", fmt.Errorf("is %d characters long (at most %d: the gateway prefixes it with a tag of its scope)", len(id), MaxClientIDLen)
	}
	return tag + id, nil
}
