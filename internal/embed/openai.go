package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/vector"
)

// Config configures an OpenAI-compatible embeddings client.
type Config struct {
	// BaseURL of the server, with or without the /v1 suffix:
	// "https://api.openai.com/v1", "http://tei:8080", "http://ollama:11434/v1".
	BaseURL string
	// Model is sent as "model" and reported by Model().
	Model string
	// Dimension every returned vector must have.
	Dimension int
	// APIKey, when set, is sent as "Authorization: Bearer <key>". It never appears
	// in errors.
	APIKey string
	// HTTPClient defaults to a client with a 60s timeout.
	HTTPClient *http.Client
	// BatchSize is the number of texts per request; default 32 (the default limit
	// of text-embeddings-inference).
	BatchSize int
	// MaxRetries is how often a request failing with 408, 429, 5xx or a transport
	// error is retried; default 3. Negative means never.
	MaxRetries int
	// RetryBackoff is the wait before the first retry, doubled for each further
	// one; default 500ms. A Retry-After header (in seconds) takes precedence, up to
	// maxRetryAfter.
	RetryBackoff time.Duration
	// Roles is how queries and passages reach the model: InputType sends
	// "input_type", Prefix prepends QueryPrefix or PassagePrefix to every text (a
	// known model family's when both are empty, see KnownPrefixes), None (or zero)
	// sends texts as they are. Auto must be resolved first (DetectRoles).
	//
	// A prefix comes on top of the store's input limit (Limit), which bounds the
	// text itself: the prefix is the convention's, at most MaxPrefixBytes, and never
	// costs the memory any of its text.
	Roles Roles
}

const (
	defaultBatchSize    = 32
	defaultMaxRetries   = 3
	defaultRetryBackoff = 500 * time.Millisecond
	maxRetryAfter       = 30 * time.Second
	maxResponseBytes    = 64 << 20
	bodyExcerptBytes    = 300
)

// OpenAI is an Embedder backed by an OpenAI-compatible POST /v1/embeddings endpoint.
// It is safe for concurrent use.
type OpenAI struct {
	cfg      Config
	endpoint string // full URL of the embeddings endpoint
	display  string // endpoint without credentials, for errors
}

var _ Embedder = (*OpenAI)(nil)

// NewOpenAI validates cfg and returns a client. It does not contact the server.
func NewOpenAI(cfg Config) (*OpenAI, error) {
	if cfg.Model == "" {
		return nil, errors.New("embeddings client: model is required")
	}
	if cfg.Dimension < 1 {
		return nil, fmt.Errorf("embeddings client: dimension %d must be positive", cfg.Dimension)
	}
	u, err := url.Parse(strings.TrimSpace(cfg.BaseURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("embeddings client: base URL must be an absolute http(s) URL")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(u.Path, "/v1") {
		u.Path += "/v1"
	}
	u.Path += "/embeddings"
	u.RawPath = ""
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 60 * time.Second}
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = defaultBatchSize
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = defaultMaxRetries
	}
	if cfg.MaxRetries < 0 {
		cfg.MaxRetries = 0
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = defaultRetryBackoff
	}
	if cfg.Roles.Convention == ConventionAuto {
		return nil, errors.New("embeddings client: the Auto roles convention must be resolved first (DetectRoles)")
	}
	if err := cfg.Roles.Validate(); err != nil {
		return nil, fmt.Errorf("embeddings client: %w", err)
	}
	if cfg.Roles, err = ResolvePrefixes(cfg.Roles, cfg.Model); err != nil {
		return nil, fmt.Errorf("embeddings client: %w", err)
	}
	return &OpenAI{cfg: cfg, endpoint: u.String(), display: u.Redacted()}, nil
}

// Model returns the configured model name.
func (o *OpenAI) Model() string { return o.cfg.Model }

// Dimension returns the configured dimension.
func (o *OpenAI) Dimension() int { return o.cfg.Dimension }

// Roles returns the resolved convention (prefixes filled in).
func (o *OpenAI) Roles() Roles { return o.cfg.Roles }

// Endpoint returns the URL requests are sent to (credentials in it redacted).
func (o *OpenAI) Endpoint() string { return o.display }

type embeddingsRequest struct {
	Model string   `json:"model"`
	Input []string `json:"input"`
	// InputType is "query" or "passage" with the InputType convention.
	InputType string `json:"input_type,omitempty"`
}

type embeddingsResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

// Embed sends texts in batches of BatchSize, in role as the convention says, and
// returns their vectors in order.
func (o *OpenAI) Embed(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += o.cfg.BatchSize {
		batch := texts[start:min(start+o.cfg.BatchSize, len(texts))]
		vecs, err := o.embedBatch(ctx, o.request(role, batch))
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// request is the body of one batch in role.
func (o *OpenAI) request(role Role, texts []string) embeddingsRequest {
	req := embeddingsRequest{Model: o.cfg.Model, Input: texts}
	switch r := o.cfg.Roles; r.Convention {
	case ConventionInputType:
		req.InputType = role.String()
	case ConventionPrefix:
		prefix := r.PassagePrefix
		if role == Query {
			prefix = r.QueryPrefix
		}
		if prefix != "" {
			req.Input = make([]string, len(texts))
			for i, t := range texts {
				req.Input[i] = prefix + t
			}
		}
	}
	return req
}

func (o *OpenAI) embedBatch(ctx context.Context, er embeddingsRequest) ([][]float32, error) {
	texts := er.Input
	body, err := json.Marshal(er)
	if err != nil {
		return nil, err
	}
	var resp embeddingsResponse
	for attempt := 0; ; attempt++ {
		retryAfter, err := o.post(ctx, body, &resp)
		if err == nil {
			break
		}
		var re *retryableError
		if !errors.As(err, &re) || attempt >= o.cfg.MaxRetries {
			if re != nil {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt+1)
			}
			return nil, err
		}
		wait := min(o.cfg.RetryBackoff<<attempt, maxRetryAfter)
		if retryAfter > 0 {
			wait = min(retryAfter, maxRetryAfter)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (gave up waiting to retry: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
	return o.order(resp, len(texts))
}

// order checks the response against the request and sorts it by index.
func (o *OpenAI) order(resp embeddingsResponse, n int) ([][]float32, error) {
	if len(resp.Data) != n {
		return nil, fmt.Errorf("embeddings from %s (model %s): got %d embeddings for %d inputs", o.display, o.cfg.Model, len(resp.Data), n)
	}
	out := make([][]float32, n)
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= n || out[d.Index] != nil {
			return nil, fmt.Errorf("embeddings from %s (model %s): invalid or repeated index %d", o.display, o.cfg.Model, d.Index)
		}
		if len(d.Embedding) != o.cfg.Dimension {
			return nil, vector.DimensionError(fmt.Sprintf("embedding %d from %s (model %s)", d.Index, o.display, o.cfg.Model), o.cfg.Dimension, len(d.Embedding))
		}
		out[d.Index] = d.Embedding
	}
	return out, nil
}

// StatusError is a server's answer other than 200: Code is its HTTP status.
type StatusError struct {
	Code int
	err  error
}

func (e *StatusError) Error() string { return e.err.Error() }
func (e *StatusError) Unwrap() error { return e.err }

// retryableError marks failures worth retrying: 408, 429, 5xx and transport errors.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// post sends one request and decodes a 200 response into out. On failure it returns
// the Retry-After delay the server asked for, if any.
func (o *OpenAI) post(ctx context.Context, body []byte, out *embeddingsResponse) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("embeddings request to %s: %w", o.display, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if o.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.cfg.APIKey)
	}
	res, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("embeddings request to %s: %w", o.display, ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL, which may hold credentials
		}
		return 0, &retryableError{fmt.Errorf("embeddings request to %s: %s", o.display, o.redact(err.Error()))}
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		excerpt, _ := io.ReadAll(io.LimitReader(res.Body, bodyExcerptBytes))
		err := fmt.Errorf("embeddings request to %s (model %s): status %s: %s",
			o.display, o.cfg.Model, res.Status, o.redact(cleanExcerpt(excerpt)))
		if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusRequestTimeout || res.StatusCode >= 500 {
			return parseRetryAfter(res.Header.Get("Retry-After")), &retryableError{&StatusError{Code: res.StatusCode, err: err}}
		}
		return 0, &StatusError{Code: res.StatusCode, err: err}
	}
	dec := json.NewDecoder(io.LimitReader(res.Body, maxResponseBytes))
	*out = embeddingsResponse{}
	if err := dec.Decode(out); err != nil {
		return 0, fmt.Errorf("embeddings response from %s (model %s): %w", o.display, o.cfg.Model, err)
	}
	return 0, nil
}

// redact removes the API key from server-provided text (some servers echo it).
func (o *OpenAI) redact(s string) string {
	if o.cfg.APIKey == "" {
		return s
	}
	return strings.ReplaceAll(s, o.cfg.APIKey, "[REDACTED]")
}

// cleanExcerpt makes a body excerpt printable on one line.
func cleanExcerpt(b []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if s == "" {
		return "(empty body)"
	}
	return s
}

func parseRetryAfter(v string) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || secs <= 0 {
		return 0
	}
	return time.Duration(secs) * time.Second
}
