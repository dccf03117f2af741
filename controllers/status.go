package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged is the one way status is written: nothing when the status did
// not change, else a merge patch against original with an optimistic lock (a conflict
// comes back as an error and the work queue retries). It reports whether it patched.
func patchStatusIfChanged(ctx context.Context, c client.Client, original, obj client.Object, before, after any) (bool, error) {
	if equality.Semantic.DeepEqual(before, after) {
		return false, nil
	}
	return true, c.Status().Patch(ctx, obj, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
}
