package milvus

import (
	"context"
	"errors"
	"fmt"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
)

// OwnerProperty is the collection property that holds the identity of the store a
// collection belongs to. A property, not the description: Milvus Lite drops a
// collection's description, while both it and Milvus 2.3 keep properties, report
// them in DescribeCollection and let AlterCollection set one (tested on both).
const OwnerProperty = "memory-operator.owner"

// ErrNotOwner is wrapped by the errors of EnsureCollection, DropCollection and
// CheckOwner for a collection that exists and is not the given store's: another
// store's, or one without an owner mark that the caller may not adopt.
var ErrNotOwner = errors.New("milvus collection is not this store's")

// Owner is the store a collection is made for, and whether an unmarked collection may
// become its own.
type Owner struct {
	// ID is the store's identity, recorded on a new collection (OwnerProperty). The
	// operator uses the one it marks the store's PostgreSQL schema with.
	ID string
	// AdoptUnmarked lets EnsureCollection mark (and DropCollection drop) an existing
	// collection that carries no owner mark at all: one made before collections were
	// marked. Set it only when the caller knows that collection is this store's by
	// other means (the operator: the store's status already records this collection as
	// its own, and its PostgreSQL schema carries its mark). A collection marked as
	// another's is never adopted.
	AdoptUnmarked bool
}

// CheckOwner reports whether the collection exists and, when it does, that it is
// owner's: marked with owner.ID, or unmarked and owner.AdoptUnmarked. Otherwise the
// error wraps ErrNotOwner and says whose it is.
func CheckOwner(ctx context.Context, c client.Client, name string, owner Owner) (exists bool, err error) {
	if err := ValidCollectionName(name); err != nil {
		return false, err
	}
	if owner.ID == "" {
		return false, errors.New("milvus: no owner given for collection " + name)
	}
	has, err := c.HasCollection(ctx, name)
	if err != nil {
		return false, fmt.Errorf("milvus: check collection %s: %w", name, err)
	}
	if !has {
		return false, nil
	}
	coll, err := c.DescribeCollection(ctx, name)
	if err != nil {
		return true, fmt.Errorf("milvus: describe collection %s: %w", name, err)
	}
	_, err = ownership(coll, owner)
	return true, err
}

// ownership checks coll against owner; marked is false for an unmarked collection
// that owner may adopt.
func ownership(coll *entity.Collection, owner Owner) (marked bool, err error) {
	got, ok := coll.Properties[OwnerProperty]
	switch {
	case ok && got == owner.ID:
		return true, nil
	case ok:
		return true, fmt.Errorf("%w: collection %s belongs to store %q, not %q; another MemoryStore uses this tenant on this Milvus",
			ErrNotOwner, coll.Name, got, owner.ID)
	case owner.AdoptUnmarked:
		return false, nil
	default:
		return false, fmt.Errorf("%w: collection %s exists without an owner mark (property %s); it was made by an earlier memory-operator "+
			"or by someone else, and nothing says it is store %q's", ErrNotOwner, coll.Name, OwnerProperty, owner.ID)
	}
}

// attr is a collection property for AlterCollection (the SDK's own types are only
// the TTL and similar; any key is accepted by the servers).
type attr struct{ key, value string }

func (a attr) KeyValue() (string, string) { return a.key, a.value }
func (a attr) Valid() error               { return nil }

// adopt marks an unmarked collection as owner's, then reads the mark back: of two
// callers adopting at once, the one whose mark did not stick learns it here.
func adopt(ctx context.Context, c client.Client, name string, owner Owner) error {
	if err := c.AlterCollection(ctx, name, attr{OwnerProperty, owner.ID}); err != nil {
		return fmt.Errorf("milvus: mark collection %s as store %q's: %w", name, owner.ID, err)
	}
	coll, err := c.DescribeCollection(ctx, name)
	if err != nil {
		return fmt.Errorf("milvus: describe collection %s: %w", name, err)
	}
	_, err = ownership(coll, Owner{ID: owner.ID})
	return err
}
