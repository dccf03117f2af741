// Package embed turns memory text into vectors: a built-in deterministic hashing
// embedder that works offline, and a client for OpenAI-compatible /v1/embeddings
// servers (OpenAI, text-embeddings-inference, Ollama, vLLM).
package embed

import "context"

// Embedder maps texts to vectors of a fixed dimension. Embed returns one vector per
// text, in the order of texts, each embedded in role (a search's query, or a passage:
// a memory's text). Model names the model and Roles how the roles reach it, so that
// vectors of different models or conventions are never mixed (a snapshot records
// both; a restore re-embeds when either differs).
type Embedder interface {
	Embed(ctx context.Context, role Role, texts []string) ([][]float32, error)
	Model() string
	Dimension() int
	Roles() Roles
}
