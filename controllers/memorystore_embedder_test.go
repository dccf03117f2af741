package controllers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/embed"
)

// fakeModelServer is a FAKE OpenAI-compatible embeddings server: no real model can be
// served in these tests, so it answers /v1/embeddings with the built-in hashing
// embedder's vectors of a fixed dimension, and insists on a bearer token.
func fakeModelServer(t *testing.T, dim int, token string) *httptest.Server {
	t.Helper()
	h := embed.NewHashing(dim)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
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
