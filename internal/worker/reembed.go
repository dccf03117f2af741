package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// A re-embed fills an index generation (pgstore's generations.go) with the vectors
// of another embedding model while the store keeps serving from its current one:
//
//  1. it waits until every write that may have run before the generation began
//     recording changes has ended (pgstore.WaitForEarlierWriters);
//  2. the backfill walks every memory in memory_id order, a page at a time, embeds
//     the live ones with the new model at the configured pace and writes them to the
//     generation's index, saving its place after every page: a worker that dies
//     resumes where the last one stopped;
//  3. between pages and after the walk it catches up on the changes recorded for the
//     generation (new, changed, archived and deleted memories, whoever wrote them),
//     until none is left;
//  4. it checks that every memory that must be searchable has a vector in the new
//     index and, given the serving generation, that the new model finds a sample
//     of memories by their own text about as often as the serving one does;
//  5. it records that the generation passed (pgstore.MarkVerified), and with Follow
//     keeps catching up until the operator cuts over to the generation (or drops
//     it), so that the new index never falls behind; a run that finds the
//     generation serving already only finishes the changes recorded before.

// ErrSwitchCheckFailed is wrapped by RunReembed when the new index is complete but
// fails its check: memories without a vector, or a sample recall too low.
var ErrSwitchCheckFailed = errors.New("the new index failed its check")

// ReembedSummary is what a re-embed did, as its Job's termination message carries it.
type ReembedSummary struct {
	Generation int    `json:"generation"`
	Model      string `json:"model"`
	// Total is the memories that must be searchable when the backfill ended;
	// Embedded those the backfill embedded (over all runs), Changes the recorded
	// changes it caught up on, Refused those whose text the input limit refuses
	// (they get no vector, as on the serving index).
	Total    int64 `json:"total"`
	Embedded int64 `json:"embedded"`
	Changes  int64 `json:"changes"`
	Refused  int64 `json:"refused"`
	// Missing counts memories without a vector in the new index after the catch-up
	// (the first few are named in Error).
	Missing int64 `json:"missing"`
	// Rate is the backfill's pace this run, in memories a second.
	Rate float64 `json:"rate"`
	// ServingRecall and Recall are the self-recall@10 of the sample on the serving
	// and the new generation (-1: not measured).
	ServingRecall float64 `json:"servingRecall"`
	Recall        float64 `json:"recall"`
	Sampled       int     `json:"sampled"`
	Verified      bool    `json:"verified"`
	// Serving says the generation serves now (the worker followed it to the cutover).
	Serving bool   `json:"serving,omitempty"`
	Seconds int64  `json:"seconds"`
	Error   string `json:"error,omitempty"`
}

// TerminationMessage is the summary as JSON, as the controller reads it.
func (s ReembedSummary) TerminationMessage() ([]byte, error) {
	if len(s.Error) > 1024 {
		s.Error = s.Error[:1024]
	}
	return json.Marshal(s)
}

// ParseReembedSummary reads a re-embed's termination message.
func ParseReembedSummary(msg string) (ReembedSummary, error) {
	var s ReembedSummary
	if err := json.Unmarshal([]byte(msg), &s); err != nil {
		return s, fmt.Errorf("re-embed summary: %w", err)
	}
	return s, nil
}

// reembed is one run's state.
type reembed struct {
	// serving is set once the generation serves (the final catch-up).
	serving bool
	cfg     ReembedConfig
	store   *pgstore.Store
	mem     *service.Memory
	paced   *embed.Paced
	gen     pgstore.Generation
	sum     ReembedSummary
	log     *slog.Logger
}

// RunReembed fills cfg.Generation's index as the package comment says. The summary
// is returned with any error, counting what was done.
func RunReembed(ctx context.Context, cfg ReembedConfig, sec ReembedSecrets, log *slog.Logger) (ReembedSummary, error) {
	start := time.Now()
	r := &reembed{cfg: cfg, log: log, sum: ReembedSummary{Generation: cfg.Generation, Model: cfg.Embedder.modelName(), ServingRecall: -1, Recall: -1}}
	err := r.run(ctx, sec)
	r.sum.Seconds = int64(time.Since(start).Seconds())
	if err != nil {
		r.sum.Error = err.Error()
	}
	return r.sum, err
}

func (r *reembed) run(ctx context.Context, sec ReembedSecrets) error {
	pool, closeAll, err := r.prepare(ctx, sec)
	if err != nil {
		return err
	}
	defer closeAll()
	store := r.store
	if r.gen.State == pgstore.GenerationServing {
		// The cutover happened (this is a retried Job): only the changes recorded
		// before it are left to do.
		r.serving = true
		if err := r.catchUp(ctx, -1); err != nil {
			return err
		}
		r.sum.Serving = true
		return nil
	}
	if err := store.WaitForEarlierWriters(ctx, 50*time.Millisecond); err != nil {
		return err
	}
	if err := r.backfill(ctx); err != nil {
		return err
	}
	if err := r.catchUp(ctx, -1); err != nil {
		return err
	}
	if err := r.buildSearchIndex(ctx); err != nil {
		return err
	}
	// What was written while the index was built (minutes, at scale), so that the
	// check finds it.
	if err := r.catchUp(ctx, -1); err != nil {
		return err
	}
	if err := r.verify(ctx, pool, sec); err != nil {
		return err
	}
	if r.cfg.Follow {
		return r.follow(ctx)
	}
	return nil
}

// prepare opens the store's tables (the generation's vectors go through its index
// only), reads the generation, and opens its memory layer; closeAll closes both.
func (r *reembed) prepare(ctx context.Context, sec ReembedSecrets) (pool *pgxpool.Pool, closeAll func(), err error) {
	pool, store, err := openStore(ctx, sec.PostgresURI, r.cfg.Schema, engine.Vectors{})
	if err != nil {
		return nil, nil, err
	}
	r.store = store
	if r.gen, err = store.GenerationByNumber(ctx, r.cfg.Generation); err == nil {
		err = r.checkGeneration()
	}
	var closeIndex func()
	if err == nil {
		closeIndex, err = r.open(ctx, pool, sec)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, func() { closeIndex(); pool.Close() }, nil
}

// checkGeneration refuses a generation whose model is not the one this worker was
// given.
func (r *reembed) checkGeneration() error {
	g := r.gen
	switch {
	case g.Model != r.sum.Model || g.Dimension != r.cfg.Embedder.Dimension:
		return fmt.Errorf("index generation %d is for %s (dimension %d), not %s (dimension %d)",
			g.Number, g.Model, g.Dimension, r.sum.Model, r.cfg.Embedder.Dimension)
	}
	return nil
}

// open builds the memory layer over the generation's index and model.
func (r *reembed) open(ctx context.Context, pool *pgxpool.Pool, sec ReembedSecrets) (func(), error) {
	e, err := r.cfg.Embedder.embedder(sec.EmbedderAPIKey)
	if err != nil {
		return nil, err
	}
	r.paced = embed.NewPaced(e, r.cfg.Rate, r.cfg.Batch)
	idx, closeIndex, err := r.cfg.Open(ctx, pool, r.cfg.Schema, r.cfg.Embedder.spec(), sec.Milvus)
	if err != nil {
		return nil, fmt.Errorf("opening the index of generation %d: %w", r.cfg.Generation, err)
	}
	r.mem, err = service.NewWith(r.store, idx, r.paced, service.Options{InputLimit: r.cfg.Embedder.limit()})
	if err != nil {
		closeIndex()
		return nil, err
	}
	return closeIndex, nil
}

// buildSearchIndex builds the generation's search index when its table was filled
// without one: a PGVector generation starts with its HNSW index held back, since
// inserting every vector into the graph costs many times building it once after.
// Changes after the build go through the graph; the check then searches with it.
func (r *reembed) buildSearchIndex(ctx context.Context) error {
	bl, ok := r.mem.Index().(engine.BulkLoader)
	if !ok {
		return nil
	}
	since, err := bl.SearchIndexDeferred(ctx)
	if err != nil || since == "" {
		return err
	}
	r.log.Info("building the search index of the new generation", "generation", r.cfg.Generation)
	start := time.Now()
	if err := bl.BuildSearchIndex(ctx, r.cfg.IndexBuildMemory); err != nil {
		return fmt.Errorf("index generation %d: %w", r.cfg.Generation, err)
	}
	r.log.Info("built the search index", "generation", r.cfg.Generation, "seconds", time.Since(start).Seconds())
	return nil
}

// backfill walks the memories after the saved place, catching up on recorded changes
// after each page so that they never pile up behind a long walk.
func (r *reembed) backfill(ctx context.Context) error {
	after, embedded := r.gen.BackfillAfter, r.gen.Embedded
	if r.gen.BackfillDone {
		r.sum.Embedded = embedded
		return nil
	}
	// Memories written from now on have their changes recorded: the walk covers
	// those there are now.
	until, err := r.store.BoundBackfill(ctx, r.gen.Number)
	if err != nil {
		return err
	}
	started, startEmbedded := time.Now(), embedded
	lastLog := started
	for {
		page, err := r.store.BackfillPage(ctx, after, until, r.cfg.Batch)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			break
		}
		refused, err := r.mem.Reindex(ctx, page, nil, false)
		if err != nil {
			return fmt.Errorf("backfill after %q: %w", after, err)
		}
		r.sum.Refused += int64(len(refused))
		for _, it := range page {
			if it.ArchivedAt == nil {
				embedded++
			}
		}
		after = page[len(page)-1].MemoryID
		rate := float64(embedded-startEmbedded) / max(time.Since(started).Seconds(), 1e-3)
		if err := r.store.SaveBackfill(ctx, r.gen.Number, after, false, embedded, rate); err != nil {
			return err
		}
		r.sum.Embedded, r.sum.Rate = embedded, rate
		if err := r.catchUp(ctx, 1); err != nil {
			return err
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			r.log.Info("re-embedding", "generation", r.gen.Number, "embedded", embedded, "after", after, "rate", rate)
		}
	}
	r.sum.Embedded = embedded
	return r.store.SaveBackfill(ctx, r.gen.Number, after, true, embedded, r.sum.Rate)
}

// catchUp brings the index in line with up to pages pages of recorded changes;
// with pages < 0, until a page is not full: what was recorded when it began is done,
// and writers that outpace the new model cannot hold it forever (what they add is
// for the next round).
func (r *reembed) catchUp(ctx context.Context, pages int) error {
	for i := 0; pages < 0 || i < pages; i++ {
		refs, err := r.store.GenerationChanges(ctx, r.gen.Number, r.cfg.Batch)
		if err != nil || len(refs) == 0 {
			return err
		}
		if pages < 0 && len(refs) < r.cfg.Batch {
			pages = i + 1 // this page is the last of this round
		}
		ids := make([]string, len(refs))
		for j, ref := range refs {
			ids[j] = ref.MemoryID
		}
		items, err := r.store.GetMany(ctx, ids)
		if err != nil {
			return err
		}
		found := make(map[string]bool, len(items))
		for _, it := range items {
			found[it.MemoryID] = true
		}
		var gone []string
		for _, id := range ids {
			if !found[id] {
				gone = append(gone, id)
			}
		}
		// Once the generation serves, the gateway writes it too and no change is
		// recorded any more: what is written from an older read must be checked.
		refused, err := r.mem.Reindex(ctx, items, gone, r.serving)
		if err != nil {
			return fmt.Errorf("catching up on changes: %w", err)
		}
		r.sum.Refused += int64(len(refused))
		if err := r.store.GenerationChangesDone(ctx, r.gen.Number, refs); err != nil {
			return err
		}
		r.sum.Changes += int64(len(refs))
	}
	return nil
}

// maxNamedMissing bounds the memories without a vector named in the error.
const maxNamedMissing = 5

// verify checks that every memory that must be searchable has a vector in the new
// index, then the sample's self-recall.
func (r *reembed) verify(ctx context.Context, pool *pgxpool.Pool, sec ReembedSecrets) error {
	missing, err := r.missingVectors(ctx)
	if err != nil {
		return err
	}
	if r.sum.Missing > 0 {
		return fmt.Errorf("%w: %d memories have no vector in generation %d (%v)", ErrSwitchCheckFailed, r.sum.Missing, r.gen.Number, missing)
	}
	if err := r.sample(ctx, pool, sec); err != nil {
		return err
	}
	r.sum.Verified = true
	// The operator cuts over once it reads this.
	return r.store.MarkVerified(ctx, r.gen.Number, r.sum.Recall, r.sum.ServingRecall)
}

// missingVectors counts (in r.sum.Missing) the live memories without a vector in
// the new index, but those whose text the input limit refuses and those whose change
// is still to be caught up on, and names the first. It reads IDs, and the rows of
// the few without a vector only.
func (r *reembed) missingVectors(ctx context.Context) ([]string, error) {
	fetcher, ok := r.mem.Index().(engine.Fetcher)
	if !ok {
		return nil, fmt.Errorf("the %s index cannot read vectors back to be checked", r.cfg.VectorEngine)
	}
	var named []string
	total, after := int64(0), ""
	for {
		ids, err := r.store.IndexedIDs(ctx, after, 1000)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			break
		}
		after = ids[len(ids)-1]
		vecs, err := fetcher.Fetch(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("reading back the vectors of generation %d: %w", r.gen.Number, err)
		}
		var absent []string
		for _, id := range ids {
			if v, ok := vecs[id]; !ok || len(v) != r.cfg.Embedder.Dimension {
				absent = append(absent, id)
			}
		}
		total += int64(len(ids))
		if len(absent) == 0 {
			continue
		}
		missing, refused, err := r.unexcused(ctx, absent)
		if err != nil {
			return nil, err
		}
		total -= int64(refused)
		r.sum.Missing += int64(len(missing))
		named = append(named, missing[:min(len(missing), maxNamedMissing-len(named))]...)
	}
	r.sum.Total = total
	return named, nil
}

// unexcused returns which of absent (IDs of live memories without a vector) have
// no excuse, and how many the input limit refuses: a memory written since the last
// catch-up has its change recorded, and the next one writes its vector.
func (r *reembed) unexcused(ctx context.Context, absent []string) (missing []string, refused int, err error) {
	owed, err := r.store.GenerationChanged(ctx, r.gen.Number, absent)
	if err != nil {
		return nil, 0, err
	}
	items, err := r.store.GetMany(ctx, absent)
	if err != nil {
		return nil, 0, err
	}
	limit := r.cfg.Embedder.limit()
	for _, it := range items {
		if _, _, err := limit.Prepare(it.MemoryID, it.EmbeddingText()); errors.Is(err, embed.ErrTextTooLong) {
			refused++
			continue
		}
		if !owed[it.MemoryID] && it.ArchivedAt == nil {
			missing = append(missing, it.MemoryID)
		}
	}
	return missing, refused, nil
}

// sample measures how often a sampled memory's own text, as a query, finds it
// among the top 10 of its scope: on the new index, and on the serving one when
// given. The new model passes when it does at most Tolerance worse.
func (r *reembed) sample(ctx context.Context, pool *pgxpool.Pool, sec ReembedSecrets) error {
	if r.cfg.SampleScopes == 0 || r.cfg.SampleQueries == 0 {
		return nil
	}
	items, err := r.sampleItems(ctx)
	if err == nil {
		items, err = r.caughtUp(ctx, items)
	}
	if err != nil || len(items) == 0 {
		return err
	}
	r.sum.Sampled = len(items)
	if r.sum.Recall, err = selfRecall(ctx, r.mem.Index(), r.paced, r.cfg.Embedder.limit(), items); err != nil {
		return fmt.Errorf("sampling generation %d: %w", r.gen.Number, err)
	}
	if r.cfg.Serving == nil {
		return nil
	}
	s := r.cfg.Serving
	e, err := s.Embedder.embedder(sec.ServingEmbedderAPIKey)
	if err != nil {
		return err
	}
	idx, closeIndex, err := s.Open(ctx, pool, r.cfg.Schema, s.Embedder.spec(), sec.Milvus)
	if err != nil {
		return fmt.Errorf("opening the serving index: %w", err)
	}
	defer closeIndex()
	if r.sum.ServingRecall, err = selfRecall(ctx, idx, e, s.Embedder.limit(), items); err != nil {
		return fmt.Errorf("sampling the serving generation: %w", err)
	}
	if r.sum.Recall < r.sum.ServingRecall-r.cfg.Tolerance {
		return fmt.Errorf("%w: %s finds %.3f of %d sampled memories by their own text among the top %d, %s %.3f (tolerance %.3f)",
			ErrSwitchCheckFailed, r.sum.Model, r.sum.Recall, len(items), drillK, s.Embedder.modelName(), r.sum.ServingRecall, r.cfg.Tolerance)
	}
	return nil
}

// caughtUp leaves out of items the memories with a change still to catch up on:
// written since the last catch-up, they have no vector in the new index yet, or
// one of their text before. The completeness check excuses them too; sampled, they
// would count against the new model for what the worker has still to do (agents
// writing while the check runs failed a switch that way). Items are read before
// the changes: one written after the read keeps, in the new index, the vector of
// the text read (nothing catches up during the check), which is the one queried.
func (r *reembed) caughtUp(ctx context.Context, items []memory.Item) ([]memory.Item, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.MemoryID
	}
	owed, err := r.store.GenerationChanged(ctx, r.gen.Number, ids)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(items, func(it memory.Item) bool { return owed[it.MemoryID] }), nil
}

// sampleItems picks the sample: SampleQueries memories of each of SampleScopes
// scopes, chosen by hash as a drill's.
func (r *reembed) sampleItems(ctx context.Context) ([]memory.Item, error) {
	scopes, err := r.store.SampleScopes(ctx, r.cfg.SampleScopes)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, scope := range scopes {
		some, err := r.store.SampleMemories(ctx, scope, r.cfg.SampleQueries)
		if err != nil {
			return nil, err
		}
		ids = append(ids, some...)
	}
	return r.store.GetMany(ctx, ids)
}

// selfRecall is the share of items found among the top drillK of their scope when
// searching idx with their own text embedded by e as a query.
func selfRecall(ctx context.Context, idx vector.Index, e embed.Embedder, limit embed.Limit, items []memory.Item) (float64, error) {
	texts := make([]string, 0, len(items))
	kept := make([]memory.Item, 0, len(items))
	for _, it := range items {
		text, _, err := limit.Prepare(it.MemoryID, it.EmbeddingText())
		if err != nil {
			continue // refused by the limit: not indexed either
		}
		texts = append(texts, text)
		kept = append(kept, it)
	}
	if len(kept) == 0 {
		return 1, nil
	}
	vecs, err := e.Embed(ctx, embed.Query, texts)
	if err != nil {
		return 0, err
	}
	found := 0
	for i, it := range kept {
		hits, err := idx.Search(ctx, vector.Query{Scope: it.Scope, Vector: vecs[i], K: drillK})
		if err != nil {
			return 0, err
		}
		if slices.ContainsFunc(hits, func(h vector.Hit) bool { return h.ID == it.MemoryID }) {
			found++
		}
	}
	return float64(found) / float64(len(kept)), nil
}

// follow keeps catching up until the generation serves (then it finishes the
// changes recorded before the cutover) or is gone.
func (r *reembed) follow(ctx context.Context) error {
	for {
		g, err := r.store.GenerationByNumber(ctx, r.gen.Number)
		if errors.Is(err, pgstore.ErrNoGeneration) {
			return fmt.Errorf("index generation %d was dropped while the worker followed it", r.gen.Number)
		}
		if err != nil {
			return err
		}
		r.serving = g.State == pgstore.GenerationServing
		if err := r.catchUp(ctx, -1); err != nil {
			return err
		}
		if r.serving {
			r.sum.Serving = true
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.Poll):
		}
	}
}
