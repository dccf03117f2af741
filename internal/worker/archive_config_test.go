package worker

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

func TestArchiveArgsRoundTrip(t *testing.T) {
	cases := []ArchiveConfig{
		{
			StoreNamespace: "team-a", StoreName: "bot", Tenant: "acme", RunName: "bot-archive-29112026",
			Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Milvus", MilvusAddress: "milvus:19530", Collection: "mem_acme"},
			EmbeddingModel: "bge-small", Dimension: 384, Metric: "IP", EmbedderRoles: embed.Roles{Convention: embed.ConventionInputType},
			Now:       time.Date(2026, 11, 29, 2, 0, 0, 123456000, time.UTC),
			Threshold: 0.05,
			HalfLives: memory.HalfLives{memory.Working: 6 * time.Hour, memory.Episodic: 720 * time.Hour, memory.Procedural: 90 * time.Minute},
			DryRun:    true,
			Cold: &Destination{Endpoint: "s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "cold",
				Prefix: "memory-operator/acme/" + ArchiveFolder + "bot-archive-29112026/"},
			DeleteAfter: 90 * 24 * time.Hour,
			BatchSize:   500,
		},
		{
			Schema: "mem_x", Vectors: engine.Vectors{VectorEngine: "Postgres"}, Dimension: 8, Metric: "COSINE", EmbeddingModel: "m",
			Threshold: 0, // archives nothing, but is valid
			Cold:      &Destination{Endpoint: "127.0.0.1:9000", Insecure: true, Bucket: "b", Prefix: "p/"}, Unencrypted: true,
		},
		// The minimum: no clock (the worker's start), no half-lives (nothing decays), no cold copy.
		{Schema: "mem_y", Vectors: engine.Vectors{VectorEngine: "Postgres"}, Metric: "COSINE", Threshold: 1e-300},
	}
	for _, want := range cases {
		got, err := ParseArchiveArgs(want.Args(), io.Discard)
		if err != nil {
			t.Fatalf("ParseArchiveArgs(%v): %v", want.Args(), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	// Args is deterministic: half-lives in type order, whatever the map's order.
	a := cases[0].Args()
	for range 20 {
		if b := cases[0].Args(); !reflect.DeepEqual(a, b) {
			t.Fatalf("Args differ between calls:\n%v\n%v", a, b)
		}
	}
	if !slices.Contains(a, "--half-lives=episodic=720h0m0s,procedural=1h30m0s,working=6h0m0s") {
		t.Errorf("half-lives not in type order: %v", a)
	}
}

func TestArchiveArgsDefaults(t *testing.T) {
	got, err := ParseArchiveArgs([]string{"--schema=s", "--threshold=0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got.VectorEngine != "Postgres" || got.Metric != "COSINE" || got.DryRun || got.Cold != nil || got.Unencrypted ||
		!got.Now.IsZero() || got.HalfLives != nil || got.DeleteAfter != 0 || got.BatchSize != 0 || got.Threshold != 0.1 {
		t.Errorf("defaults: %+v", got)
	}
}

func TestArchiveArgsRejectsBadInput(t *testing.T) {
	base := []string{"--schema=s", "--threshold=0.1"}
	cold := []string{"--cold-endpoint=e:1", "--cold-bucket=b", "--cold-prefix=p/", "--embedding-model=m", "--dimension=8"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	cases := map[string]struct {
		args []string
		want string
	}{
		"no schema":           {[]string{"--threshold=0.1"}, "missing required flags: --schema"},
		"no threshold":        {[]string{"--schema=s"}, `--threshold "" is not a non-negative number`},
		"threshold text":      {with("--threshold=low"), `--threshold "low" is not a non-negative number`},
		"negative threshold":  {with("--threshold=-0.5"), "--threshold -0.5 is not a non-negative number"},
		"NaN threshold":       {with("--threshold=NaN"), "--threshold NaN is not a non-negative number"},
		"infinite threshold":  {with("--threshold=+Inf"), "--threshold +Inf is not a non-negative number"},
		"bad now":             {with("--now=yesterday"), `--now: parsing time "yesterday"`},
		"half-life shape":     {with("--half-lives=working:6h"), `--half-lives: "working:6h" is not type=duration`},
		"half-life type":      {with("--half-lives=dream=6h"), `--half-lives: unknown memory type "dream"`},
		"half-life duration":  {with("--half-lives=working=soon"), "--half-lives: working=soon is not a positive duration"},
		"half-life zero":      {with("--half-lives=working=0s"), "--half-lives: working=0s is not a positive duration"},
		"half-life negative":  {with("--half-lives=episodic=-1h"), "--half-lives: episodic=-1h is not a positive duration"},
		"half-life twice":     {with("--half-lives=working=1h,working=2h"), "--half-lives: working is given twice"},
		"engine":              {with("--vector-engine=Faiss"), `--vector-engine "Faiss": want Postgres, PGVector or Milvus`},
		"milvus needs place":  {with("--vector-engine=Milvus", "--milvus-address=m:1"), "the Milvus engine needs --milvus-address and --collection"},
		"cold incomplete":     {with("--cold-endpoint=e:1", "--cold-prefix=p/"), "a cold package needs --cold-endpoint, --cold-bucket and --cold-prefix"},
		"cold insecure only":  {with("--cold-insecure"), "a cold package needs --cold-endpoint, --cold-bucket and --cold-prefix"},
		"cold prefix":         {with("--cold-endpoint=e:1", "--cold-bucket=b", "--cold-prefix=p", "--embedding-model=m", "--dimension=8"), "--cold-prefix must end in '/'"},
		"cold needs model":    {with(cold[:3]...), "a cold package needs --embedding-model and a positive --dimension"},
		"cold needs dim":      {with(cold[:4]...), "a cold package needs --embedding-model and a positive --dimension"},
		"delete after":        {with("--delete-after=-1h"), "--delete-after must not be negative"},
		"delete without cold": {with("--delete-after=720h"), "--delete-after needs a cold package (--cold-*)"},
		"batch size":          {with("--batch-size=-1"), "--batch-size must not be negative"},
		"unknown flag":        {with("--bogus"), "flag provided but not defined: -bogus"},
	}
	for name, tc := range cases {
		_, err := ParseArchiveArgs(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
	// The same checks hold for a configuration built in code.
	bad := ArchiveConfig{Schema: "s", Vectors: engine.Vectors{VectorEngine: "Postgres"}, Threshold: 0.1, HalfLives: memory.HalfLives{"dream": time.Hour}}
	if err := bad.check(); err == nil || !strings.Contains(err.Error(), `unknown memory type "dream"`) {
		t.Errorf("half-life of an unknown type: %v", err)
	}
	bad.HalfLives = memory.HalfLives{memory.Semantic: 0}
	if err := bad.check(); err == nil || !strings.Contains(err.Error(), "semantic=0s is not a positive duration") {
		t.Errorf("zero half-life: %v", err)
	}
}

func TestArchiveSummaryRoundTrip(t *testing.T) {
	want := ArchiveSummary{
		Now: time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC), DryRun: true,
		Scanned: 1_000_000, Archived: 100_000, ArchivedByType: map[string]int64{"episodic": 70_000, "semantic": 30_000},
		ExpiredPurged: 12, Deleted: 3, VectorsDeleted: 100_012, Recovered: 5,
		ColdPackage: "memory-operator/acme/archive/run-1/", ColdItems: 100_000,
	}
	msg, err := want.TerminationMessage()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseArchiveSummary(string(msg) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// The JSON names are the controller's contract.
	for _, field := range []string{`"now":`, `"dryRun":true`, `"scanned":`, `"archived":`, `"archivedByType":`, `"expiredPurged":`,
		`"deleted":`, `"vectorsDeleted":`, `"recovered":`, `"coldPackage":`, `"coldItems":`} {
		if !strings.Contains(string(msg), field) {
			t.Errorf("summary %s lacks %s", msg, field)
		}
	}
	// The largest summary there can be still fits a termination message.
	const maxInt = int64(^uint64(0) >> 1)
	big := ArchiveSummary{Now: want.Now, DryRun: true, Scanned: maxInt, Archived: maxInt, ExpiredPurged: maxInt, Deleted: maxInt,
		VectorsDeleted: maxInt, Recovered: maxInt, ColdItems: maxInt, ColdPackage: strings.Repeat("p", 1024),
		ArchivedByType: map[string]int64{"working": maxInt, "episodic": maxInt, "semantic": maxInt, "procedural": maxInt}}
	if _, err := big.TerminationMessage(); err != nil {
		t.Errorf("largest summary: %v", err)
	}
	if _, err := (ArchiveSummary{Now: want.Now, ColdPackage: strings.Repeat("p", MaxTerminationMessage)}).TerminationMessage(); err == nil ||
		!strings.Contains(err.Error(), "a termination message holds 4096") {
		t.Errorf("oversized summary: err = %v", err)
	}
}

func TestParseArchiveSummaryRejects(t *testing.T) {
	ok := `{"now":"2026-11-29T02:00:00Z","scanned":10`
	cases := map[string]struct{ msg, want string }{
		"error text":   {"memory-operator archive: boom", "archive summary: invalid character"},
		"empty":        {"", "archive summary: EOF"},
		"no time":      {`{"scanned":10,"archived":1}`, "archive summary: no run time"},
		"bad time":     {`{"now":"yesterday"}`, "archive summary: parsing time"},
		"negative":     {ok + `,"archived":-1}`, "archive summary: a negative count"},
		"negative typ": {ok + `,"archivedByType":{"semantic":-2}}`, "archive summary: a negative count"},
		"unknown type": {ok + `,"archivedByType":{"dream":1}}`, `archive summary: unknown memory type "dream"`},
		"trailing":     {ok + `}{}`, "archive summary: trailing data after the JSON object"},
		"not object":   {`[1,2]`, "archive summary: json: cannot unmarshal array"},
	}
	for name, tc := range cases {
		_, err := ParseArchiveSummary(tc.msg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
