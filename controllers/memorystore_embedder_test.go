package controllers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
)

// fakeModelServer is a FAKE OpenAI-compatible embeddings server: no real model can be
// served in these tests, so it answers /v1/embeddings with the built-in hashing
// embedder's vectors of a fixed dimension, and insists on a bearer token.
func fakeModelServer(t *testing.T, dim int, token string) *httptest.Server {
	return fakeModelServerWith(t, dim, token, nil)
}

// fakeModelServerWith is fakeModelServer whose requests carrying "input_type" get
// typedStatus instead of vectors, when set (a server that falls over on them). It
// ignores input_type otherwise, as many OpenAI-compatible servers do.
func fakeModelServerWith(t *testing.T, dim int, token string, typedStatus *atomic.Int32) *httptest.Server {
	t.Helper()
	h := embed.NewHashing(dim)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var req struct {
			Model     string   `json:"model"`
			Input     []string `json:"input"`
			InputType string   `json:"input_type"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if typedStatus != nil && req.InputType != "" && typedStatus.Load() != 0 {
			http.Error(w, "inference failed", int(typedStatus.Load()))
			return
		}
		vecs, err := h.Embed(r.Context(), embed.Passage, req.Input)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		type datum struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		resp := struct {
			Model string  `json:"model"`
			Data  []datum `json:"data"`
		}{Model: req.Model}
		for i, v := range vecs {
			resp.Data = append(resp.Data, datum{Index: i, Embedding: v})
		}
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestMemoryStoreChecksItsEmbedder(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	const token = "tok-3141"
	createSecret(t, ns, "model-key", map[string]string{"apiKey": token})
	srv := fakeModelServer(t, 8, token)

	withModel := func(name string, dim int32) *memoryv1alpha1.MemoryStore {
		s := f.inlineStore(ns, name, newTenant(), dim, false)
		s.Spec.Embedder = memoryv1alpha1.EmbedderSpec{
			Type: memoryv1alpha1.EmbedderOpenAI, Endpoint: srv.URL, Model: "fake-minilm",
			APIKeySecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "apiKey"},
		}
		return s
	}

	good := withModel("model-ok", 8)
	create(t, good)
	got := waitReady(t, client.ObjectKeyFromObject(good))
	g := NewWithT(t)
	g.Expect(got.Status.Conditions).To(ContainElement(And(
		HaveField("Type", memoryv1alpha1.ConditionEmbedderReady), HaveField("Status", metav1.ConditionTrue))))
	g.Expect(got.Status.Vector.EmbeddingModel).To(Equal("fake-minilm"))
	data := connectionSecret(t, got)
	g.Expect(data).To(HaveKeyWithValue("embeddingModel", "fake-minilm"))
	g.Expect(data).To(HaveKeyWithValue("embedderEndpoint", srv.URL))
	for k, v := range data {
		g.Expect(v).NotTo(ContainSubstring(token), "key %s leaks the API key", k)
	}

	// The model answers with 8 dimensions; a store declaring 16 must not become Ready.
	wrongDim := withModel("model-dim", 16)
	create(t, wrongDim)
	got = waitForCondition(t, client.ObjectKeyFromObject(wrongDim), memoryv1alpha1.ConditionEmbedderReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonEmbedderFailed)
	g.Expect(conditionMessage(got, memoryv1alpha1.ConditionEmbedderReady)).To(And(ContainSubstring("16"), ContainSubstring("8")))
}

// TestMemoryStoreCalibratesItsEmbedder: the operator resolves Auto roles and calibrates
// the near-duplicate threshold when the embedder spec is set, records both in
// status.embedder, does it again only when the embedder spec changes, and, when the
// embedder cannot be probed, reports CalibrationFailed and gives the gateway nothing.
func TestMemoryStoreCalibratesItsEmbedder(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	const token = "tok-2718"
	createSecret(t, ns, "model-key", map[string]string{"apiKey": token})
	var typedStatus atomic.Int32
	srv := fakeModelServerWith(t, 64, token, &typedStatus)
	withModel := func(name, model string) *memoryv1alpha1.MemoryStore {
		s := f.inlineStore(ns, name, newTenant(), 64, false)
		s.Spec.Embedder = memoryv1alpha1.EmbedderSpec{
			Type: memoryv1alpha1.EmbedderOpenAI, Endpoint: srv.URL, Model: model,
			APIKeySecret: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "model-key"}, Key: "apiKey"},
		}
		return s
	}
	// What the operator must find: the fake serves hashing vectors of 64 dimensions,
	// the same whatever the role.
	want, err := embed.Calibrate(context.Background(), embed.NewHashing(64))
	if err != nil {
		t.Fatal(err)
	}
	wantThreshold := strconv.FormatFloat(want.Threshold, 'f', -1, 64)

	// An e5 model behind a server that ignores input_type: Auto gives e5's prefixes.
	e5 := withModel("e5", "intfloat/multilingual-e5-small")
	create(t, e5)
	got := waitReady(t, client.ObjectKeyFromObject(e5))
	g := NewWithT(t)
	g.Expect(got.Status.Embedder).NotTo(BeNil())
	g.Expect(got.Status.Embedder.Roles).To(Equal(memoryv1alpha1.ResolvedRoles{Convention: memoryv1alpha1.RolesPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}))
	g.Expect(got.Status.Embedder.DedupThreshold).NotTo(BeEmpty())
	g.Expect(got.Status.Embedder.CalibratedFor).To(Equal(embedderDigest(got.Spec.Embedder, got.Spec.Vector.Dimension)))
	calibratedAt := got.Status.Embedder.CalibratedAt

	// A model of no known family: None, and the hashing vectors' calibration.
	plain := withModel("plain", "fake-minilm")
	create(t, plain)
	got = waitReady(t, client.ObjectKeyFromObject(plain))
	g.Expect(got.Status.Embedder.Roles.Convention).To(Equal(memoryv1alpha1.RolesNone))
	g.Expect(got.Status.Embedder.DedupThreshold).To(Equal(wantThreshold))

	// A spec change that does not touch the vectors does not recalibrate.
	g.Eventually(func() error {
		s := getStore(g, client.ObjectKeyFromObject(e5))
		s.Spec.Embedder.MaxInputBytes = 4096
		return k8sClient.Update(context.Background(), s)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		s := getStore(g, client.ObjectKeyFromObject(e5))
		g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		g.Expect(s.Status.Embedder.CalibratedAt).To(Equal(calibratedAt))
	}, 60*time.Second).Should(Succeed())

	// Declared prefixes do, and they change the vectors: an embedding switch, whose
	// new generation is calibrated with them while the store serves the old roles.
	g.Eventually(func() error {
		s := getStore(g, client.ObjectKeyFromObject(e5))
		s.Spec.Embedder.Roles = &memoryv1alpha1.EmbedderRoles{Convention: memoryv1alpha1.RolesPrefix, QueryPrefix: "q: ", PassagePrefix: "p: "}
		return k8sClient.Update(context.Background(), s)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		s := getStore(g, client.ObjectKeyFromObject(e5))
		g.Expect(s.Status.Embedding.Switch).NotTo(BeNil())
		to := s.Status.Embedding.Switch.To
		g.Expect(to.Calibration.Roles).To(Equal(memoryv1alpha1.ResolvedRoles{Convention: memoryv1alpha1.RolesPrefix, QueryPrefix: "q: ", PassagePrefix: "p: "}))
		g.Expect(to.Calibration.CalibratedFor).To(Equal(embedderDigest(s.Spec.Embedder, s.Spec.Vector.Dimension)))
		g.Expect(s.Status.Embedder.Roles.QueryPrefix).To(Equal("query: "), "the store serves the old roles until the cutover")
		g.Expect(s.Status.Embedder.CalibratedAt).To(Equal(calibratedAt))
	}, 60*time.Second).Should(Succeed())

	// A server that fails the probe: CalibrationFailed, and no gateway with a guess.
	typedStatus.Store(http.StatusInternalServerError)
	broken := withModel("broken", "intfloat/e5-base-v2")
	broken.Spec.Gateway = &memoryv1alpha1.GatewaySpec{Enabled: true}
	create(t, broken)
	got = waitForCondition(t, client.ObjectKeyFromObject(broken), memoryv1alpha1.ConditionEmbedderReady,
		metav1.ConditionFalse, memoryv1alpha1.ReasonCalibrationFailed)
	g.Expect(got.Status.Embedder).To(BeNil())
	var d appsv1.Deployment
	err = k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: broken.GatewayName()}, &d)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a gateway was created without a calibrated threshold: %v", err)

	// The server recovers: the store is calibrated and becomes Ready.
	typedStatus.Store(0)
	got = waitReady(t, client.ObjectKeyFromObject(broken))
	g.Expect(got.Status.Embedder.Roles.Convention).To(Equal(memoryv1alpha1.RolesPrefix))
}
