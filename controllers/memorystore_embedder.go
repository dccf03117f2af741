package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
)

// embedderDigest identifies what a calibration was made for: the embedder spec that
// decides the vectors (type, endpoint, model, the vector dimension, the declared
// roles) and the calibration set. The API key and the input limit are left out: they
// do not change a vector.
func embedderDigest(e memoryv1alpha1.EmbedderSpec, dim int32) string {
	// The same digest as before switches existed: a store upgraded keeps its
	// calibration.
	b, _ := json.Marshal(struct {
		Type, Endpoint, Model string
		Dimension             int32
		Roles                 memoryv1alpha1.EmbedderRoles
		Set                   string
	}{string(e.Type), e.Endpoint, e.Model, dim, e.RolesOrDefault(), embed.CalibrationSetDigest()})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// modelDigest identifies the vectors an embedder spec makes: its type, endpoint,
// model, dimension and declared roles. A store whose spec changes it switches models
// (memorystore_switch.go); the rest (the token, the input limit) applies in place.
func modelDigest(e memoryv1alpha1.EmbedderSpec, dim int32) string {
	return digestOf(modelIdentity(e, dim))
}

type modelID struct {
	Type, Endpoint, Model string
	Dimension             int32
	Roles                 memoryv1alpha1.EmbedderRoles
}

func modelIdentity(e memoryv1alpha1.EmbedderSpec, dim int32) modelID {
	t := e.Type
	if t == "" {
		t = memoryv1alpha1.EmbedderHashing
	}
	return modelID{string(t), e.Endpoint, e.Model, dim, e.RolesOrDefault()}
}

func digestOf(parts ...any) string {
	b, _ := json.Marshal(parts)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// storeRoles is the store's resolved roles convention, as status.embedder records it
// (the zero Roles, None, before the store is calibrated).
func storeRoles(store *memoryv1alpha1.MemoryStore) embed.Roles {
	return calibratedRoles(store.Status.Embedder)
}

// calibratedRoles is the roles convention a calibration resolved.
func calibratedRoles(e *memoryv1alpha1.EmbedderStatus) embed.Roles {
	if e == nil {
		return embed.Roles{}
	}
	return embed.Roles{Convention: embed.Convention(e.Roles.Convention), QueryPrefix: e.Roles.QueryPrefix, PassagePrefix: e.Roles.PassagePrefix}.Normalized()
}

// declaredRoles is spec.embedder.roles as the embed package spells it.
func declaredRoles(e memoryv1alpha1.EmbedderSpec) embed.Roles {
	r := e.RolesOrDefault()
	return embed.Roles{Convention: embed.Convention(r.Convention), QueryPrefix: r.QueryPrefix, PassagePrefix: r.PassagePrefix}
}

// resolvedRolesStatus records r for status.
func resolvedRolesStatus(r embed.Roles) memoryv1alpha1.ResolvedRoles {
	r = r.Normalized()
	c := memoryv1alpha1.RolesConvention(r.Convention)
	if c == "" {
		c = memoryv1alpha1.RolesNone
	}
	return memoryv1alpha1.ResolvedRoles{Convention: c, QueryPrefix: r.QueryPrefix, PassagePrefix: r.PassagePrefix}
}

// calibrate measures an embedder on the calibration set (embed.Calibrate) and
// returns the threshold as status.embedder records it, with an event. It runs only
// when the embedder spec changed since the last calibration (calibratedFor).
func (r *MemoryStoreReconciler) calibrate(ctx context.Context, store *memoryv1alpha1.MemoryStore, e embed.Embedder, digest string) (*memoryv1alpha1.EmbedderStatus, error) {
	c, err := embed.Calibrate(ctx, e)
	if err != nil {
		return nil, stepErrorf(memoryv1alpha1.ReasonCalibrationFailed, "calibrating the near-duplicate threshold: %v", err)
	}
	now := metav1.Now()
	cal := &memoryv1alpha1.EmbedderStatus{
		Model: e.Model(), Roles: resolvedRolesStatus(e.Roles()),
		DedupThreshold: strconv.FormatFloat(c.Threshold, 'f', -1, 64),
		DistinctMax:    strconv.FormatFloat(c.DistinctMax, 'f', 4, 64),
		Restatements:   int32(c.Restatements), RestatementsFolded: int32(c.RestatementsFolded),
		CalibratedFor: digest, CalibratedAt: &now,
	}
	r.Recorder.Eventf(store, nil, "Normal", "EmbedderCalibrated", "Calibrate", "Embedder %s, roles %s: %s", e.Model(), e.Roles(), fmt.Sprint(c))
	return cal, nil
}
