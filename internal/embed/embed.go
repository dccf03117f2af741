// Package embed turns memory text into vectors: a built-in deterministic hashing
// embedder that works offline, and a client for OpenAI-compatible /v1/embeddings
// servers (OpenAI, text-embeddings-inference, Ollama, vLLM).
package embed

import "context"

// Embedder maps texts to vectors of a fixed dimension. Embed returns one vector per
// text, in the order of texts. Model names the model, so that vectors of different
// models are never mixed (a snapshot records it; a restore re-embeds when it differs).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
	Dimension() int
}
