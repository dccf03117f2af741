package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Embedding switch defaults.
const (
	// DefaultSwitchMaxRate is how many memories a second a switch embeds at most,
	// unless spec.embeddingSwitch.maxRate says otherwise: a switch shares the
	// embedding server with the agents.
	DefaultSwitchMaxRate = 100
	// DefaultSwitchTolerance is how much lower than the serving model's the new
	// model's self-recall may be on the sample (a decimal string in the spec).
	DefaultSwitchTolerance = "0.05"
)

// EmbeddingSwitchSpec tunes how the store changes its embedding model in place:
// changing spec.embedder (or vector.dimension) re-embeds every memory into a new
// index generation while the store serves from the current one, then cuts over.
type EmbeddingSwitchSpec struct {
	// MaxRate is the most memories a second the re-embed sends to the embedder
	// (default 100).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxRate *int32 `json:"maxRate,omitempty"`
	// RetainPrevious is how long the previous generation is kept, and kept current,
	// after a cutover (default 24h): setting the previous model again within it
	// switches back without re-embedding. 0 drops it at once.
	// +optional
	RetainPrevious *metav1.Duration `json:"retainPrevious,omitempty"`
	// Tolerance is how much lower than the serving model's the new model's
	// self-recall@10 may be on the check's sample (each sampled memory's own text as
	// the query), a decimal string from "0" to "1" (default "0.05").
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]{1,6})?|1(\.0{1,6})?)$`
	// +optional
	Tolerance string `json:"tolerance,omitempty"`
	// Suspend holds a switch that has not cut over yet: its Job is deleted (the next
	// one resumes where it stopped) and the store goes on serving the current model.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// Job tunes the re-embed Job (resources, deadline: none by default).
	// +optional
	Job *JobOptions `json:"job,omitempty"`
}

// EmbeddingGeneration is one index generation of the store: the embedder spec that
// made its vectors and where they are.
type EmbeddingGeneration struct {
	// Generation numbers the store's indexes: 1 is the one it was made with.
	Generation int32 `json:"generation"`
	// Embedder is spec.embedder as it was when the generation was started.
	Embedder EmbedderSpec `json:"embedder"`
	// Dimension of its vectors.
	Dimension int32 `json:"dimension"`
	// Index is its table (Postgres engine) or collection (Milvus).
	Index string `json:"index"`
	// Calibration is the model's resolved roles and near-duplicate threshold.
	// +optional
	Calibration *EmbedderStatus `json:"calibration,omitempty"`
}

// SwitchPhase is where an embedding switch stands.
// +kubebuilder:validation:Enum=Reembedding;CuttingOver;Failed;Suspended
type SwitchPhase string

// Switch phases.
const (
	// SwitchReembedding: the Job fills the new generation and checks it.
	SwitchReembedding SwitchPhase = "Reembedding"
	// SwitchCuttingOver: the new generation passed its check; the gateway moves to it.
	SwitchCuttingOver SwitchPhase = "CuttingOver"
	// SwitchFailed: the Job failed (status.embedding.switch.message says why); the
	// store serves the current model. Delete the Job to try again.
	SwitchFailed SwitchPhase = "Failed"
	// SwitchSuspended: spec.embeddingSwitch.suspend holds the switch.
	SwitchSuspended SwitchPhase = "Suspended"
)

// EmbeddingSwitch is a switch to another model in progress.
type EmbeddingSwitch struct {
	// To is the generation being filled.
	To    EmbeddingGeneration `json:"to"`
	Phase SwitchPhase         `json:"phase"`
	// Rollback is true when To is the retained previous generation: only the
	// changes since the cutover are re-embedded.
	// +optional
	Rollback bool `json:"rollback,omitempty"`
	// Job is the re-embed Job.
	// +optional
	Job string `json:"job,omitempty"`
	// StartedAt is when the switch began.
	StartedAt metav1.Time `json:"startedAt"`
	// Embedded of Total memories are in the new generation; Rate is memories a
	// second lately and ETA the time left at that rate.
	// +optional
	Embedded int64 `json:"embedded,omitempty"`
	// +optional
	Total int64 `json:"total,omitempty"`
	// +optional
	Rate string `json:"rate,omitempty"`
	// +optional
	ETA *metav1.Duration `json:"eta,omitempty"`
	// Backlog is the changes written since that the Job has still to catch up on.
	// +optional
	Backlog int64 `json:"backlog,omitempty"`
	// Recall and ServingRecall are the check's self-recall@10 of the sample on the
	// new and the serving generation.
	// +optional
	Recall string `json:"recall,omitempty"`
	// +optional
	ServingRecall string `json:"servingRecall,omitempty"`
	// VerifiedAt is when the new generation passed its check.
	// +optional
	VerifiedAt *metav1.Time `json:"verifiedAt,omitempty"`
	// CutoverAt is when the cutover began (the gateway moving to the new generation);
	// GatewayMovedAt when every gateway pod served it.
	// +optional
	CutoverAt *metav1.Time `json:"cutoverAt,omitempty"`
	// +optional
	GatewayMovedAt *metav1.Time `json:"gatewayMovedAt,omitempty"`
	// Message says what the switch waits for, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// PreviousGeneration is the generation served before the last cutover, kept current
// until RetainedUntil for a rollback.
type PreviousGeneration struct {
	EmbeddingGeneration `json:",inline"`
	// RetiredAt is when it stopped serving; RetainedUntil, when it is dropped
	// (RetiredAt plus spec.embeddingSwitch.retainPrevious).
	RetiredAt     metav1.Time `json:"retiredAt"`
	RetainedUntil metav1.Time `json:"retainedUntil"`
}

// EmbeddingStatus is the store's embedding model: the generation searches use, a
// switch in progress and the previous generation kept for a rollback.
type EmbeddingStatus struct {
	// Serving is the generation searches use, as the gateway and every Job are
	// configured.
	Serving EmbeddingGeneration `json:"serving"`
	// Switch is the switch in progress (spec.embedder differs from Serving's).
	// +optional
	Switch *EmbeddingSwitch `json:"switch,omitempty"`
	// Previous is the generation served before the last cutover.
	// +optional
	Previous *PreviousGeneration `json:"previous,omitempty"`
	// LastSwitch says how the last switch ended.
	// +optional
	LastSwitch string `json:"lastSwitch,omitempty"`
	// HighestGeneration is the highest generation number ever used: a new
	// generation takes the next, never one a dropped generation had.
	// +optional
	HighestGeneration int32 `json:"highestGeneration,omitempty"`
}
