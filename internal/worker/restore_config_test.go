package worker

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

const testSHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestRestoreArgsRoundTrip(t *testing.T) {
	cases := []RestoreConfig{
		{
			RestoreNamespace: "team-a", RestoreName: "migrate", RestoreUID: "5a6b7c8d-0000-4c2e-9a51-0d6f3c2b1a00", AllowRepeat: true,
			Source:      Destination{Endpoint: "s3.eu-west-1.amazonaws.com", Region: "eu-west-1", Bucket: "dr", Prefix: "agents/nightly-1f0e4c9a/"},
			Unencrypted: false, ExpectManifestSHA256: testSHA,
			TargetNamespace: "team-a", TargetName: "bot-v2", Tenant: "acme-v2",
			Schema: "mem_acme_v2", Vectors: engine.Vectors{VectorEngine: "Milvus", MilvusAddress: "milvus:19530", Collection: "mem_acme_v2"},
			EmbeddingModel: "bge-small", Dimension: 512, Metric: "IP", Embedder: "OpenAI", EmbedderEndpoint: "http://tei:8080",
			EmbedderRoles: embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "Represent this sentence for searching relevant passages: "},
			ScopeMap:      []ScopeRule{{From: "user:1024", To: "user:dbc0a3"}, {From: "agent:old", To: "agent:new"}},
			PrefixMap:     []ScopeRule{{From: "user:legacy-", To: "user:"}},
			MapFile:       MappingDir + "/users.csv", MapFormat: MapFormatCSV, Unmapped: "Fail",
			Denylist: []string{"user:admin", "session:*"}, Types: []string{"working", "semantic"},
			ConflictPolicy: "Overwrite", Embeddings: "Reembed", DryRun: true, Rehydrate: true,
			DetailKey: "agents/nightly-1f0e4c9a/restores/migrate-5a6b7c8d/detail.jsonl.zst",
		},
		{
			Source:      Destination{Endpoint: "127.0.0.1:9000", Insecure: true, Bucket: "b", Prefix: "p/"},
			Unencrypted: true,
			Schema:      "mem_x", Vectors: engine.Vectors{VectorEngine: "Postgres"}, Dimension: 8, Metric: "COSINE", Embedder: "Hashing",
			MapObject: "maps/ids.jsonl", MapBucket: "maps", MapFormat: MapFormatJSONLines,
			Unmapped: "Keep", ConflictPolicy: "KeepNewer", Embeddings: "Reuse", DetailKey: "p/restores/r-1/detail.jsonl.zst",
		},
	}
	for _, want := range cases {
		got, err := ParseRestoreArgs(want.Args(), io.Discard)
		if err != nil {
			t.Fatalf("ParseRestoreArgs(%v): %v", want.Args(), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

func TestRestoreArgsDefaults(t *testing.T) {
	got, err := ParseRestoreArgs([]string{"--schema=s", "--source-endpoint=e:1", "--source-bucket=b", "--source-prefix=p/",
		"--dimension=8", "--detail-key=p/restores/r/detail.jsonl.zst"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got.Unmapped != "Keep" || got.ConflictPolicy != "KeepNewer" || got.Embeddings != "Reuse" ||
		got.Embedder != "Hashing" || got.VectorEngine != "Postgres" || got.Metric != "COSINE" || got.DryRun || got.Unencrypted {
		t.Errorf("defaults: %+v", got)
	}
}

func TestRestoreArgsRejectsBadInput(t *testing.T) {
	base := []string{"--schema=s", "--source-endpoint=e:1", "--source-bucket=b", "--source-prefix=p/", "--dimension=8", "--detail-key=k"}
	cases := map[string]struct {
		args []string
		want string
	}{
		"missing":            {[]string{"--schema=s"}, "missing required flags: --detail-key, --source-bucket, --source-endpoint, --source-prefix"},
		"prefix without /":   {append(base[:3:3], "--source-prefix=p", "--dimension=8", "--detail-key=k"), "--source-prefix must end in '/'"},
		"zero dimension":     {append(base[:4:4], "--detail-key=k"), "--dimension 0"},
		"unmapped":           {append(base, "--unmapped=Ignore"), `--unmapped "Ignore" is not one of Keep, Skip, Fail`},
		"conflict":           {append(base, "--conflict-policy=Newest"), `--conflict-policy "Newest" is not one of KeepNewer, Overwrite, Skip`},
		"embeddings":         {append(base, "--embeddings=Copy"), `--embeddings "Copy" is not one of Reuse, Reembed, Defer`},
		"type":               {append(base, "--types=semantic,dream"), `--types: unknown memory type "dream"`},
		"sha":                {append(base, "--expect-manifest-sha256=abc"), "not a hex SHA-256"},
		"milvus needs place": {append(base, "--vector-engine=Milvus"), "needs --milvus-address and --collection"},
		"openai needs model": {append(base, "--embedder=OpenAI", "--embedder-endpoint=http://e"), "needs --embedder-endpoint and --embedding-model"},
		"two maps":           {append(base, "--map-file=/m.csv", "--map-object=m.csv", "--map-format=csv"), "at most one of --map-file and --map-object"},
		"map without format": {append(base, "--map-file=/m"), `--map-format "" is not one of csv, jsonl`},
		"format without map": {append(base, "--map-format=csv"), "--map-format needs --map-file or --map-object"},
		"bucket without obj": {append(base, "--map-bucket=x"), "--map-bucket needs --map-object"},
		"bad rule":           {append(base, "--map-scopes=user:1"), `--map-scopes: "user:1" is not from=to`},
		"empty rule side":    {append(base, "--map-prefixes=user:="), `--map-prefixes: "user:=" is not from=to`},
		"unknown flag":       {append(base, "--bogus"), "flag provided but not defined"},
	}
	for name, tc := range cases {
		_, err := ParseRestoreArgs(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestRestoreDetailKey(t *testing.T) {
	if got, want := RestoreDetailKey("a/snapshots/n-1f0e4c9a/", "migrate-5a6b7c8d"),
		"a/snapshots/n-1f0e4c9a/restores/migrate-5a6b7c8d/detail.jsonl.zst"; got != want {
		t.Errorf("RestoreDetailKey = %q, want %q", got, want)
	}
}

func TestRestoreSummaryRoundTrip(t *testing.T) {
	want := RestoreSummary{
		ManifestSHA256: testSHA, FormatVersion: 1, PackageID: "00112233445566778899aabbccddeeff", Shards: 3,
		DryRun: true, Embeddings: "Reembed",
		Restored: 1200, RestoredByType: map[string]int64{"semantic": 1000, "episodic": 200},
		Scopes: 40, MappedScopes: 38, Vectors: 1200, Rehydrated: 12,
		Skipped:      SkippedCount{Denylisted: 1, Tombstoned: 2, Unmapped: 3, Expired: 4, Type: 5, Conflict: 6, Invalid: 7},
		FirstInvalid: `memory "m-1": content: must be a JSON object, got a string`,
		DetailKey:    "p/restores/r-1/detail.jsonl.zst",
		AlreadyRestored: &PriorRestore{Name: "team-a/migrate", UID: "5a6b7c8d-0000-4c2e-9a51-0d6f3c2b1a00",
			CompletedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
	}
	msg, err := want.TerminationMessage()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRestoreSummary(string(msg) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	// The largest summary there can be (every count at its maximum, the longest
	// detail key an object can have, a first-invalid message of characters that JSON
	// escapes six-fold) still fits a termination message.
	const maxInt = int64(^uint64(0) >> 1)
	big := RestoreSummary{ManifestSHA256: testSHA, FormatVersion: 99, PackageID: strings.Repeat("f", 32), Shards: 1 << 30,
		DryRun: true, Embeddings: "Reembed", Restored: maxInt, Scopes: maxInt, MappedScopes: maxInt, Vectors: maxInt, Rehydrated: maxInt,
		RestoredByType: map[string]int64{"working": maxInt, "episodic": maxInt, "semantic": maxInt, "procedural": maxInt},
		Skipped:        SkippedCount{maxInt, maxInt, maxInt, maxInt, maxInt, maxInt, maxInt, maxInt, maxInt},
		FirstInvalid:   truncateUTF8(strings.Repeat("\x01", 2*maxFirstInvalid), maxFirstInvalid),
		DetailKey:      strings.Repeat("k", 1024)}
	if _, err := big.TerminationMessage(); err != nil {
		t.Errorf("largest summary: %v", err)
	}
	if _, err := (RestoreSummary{DetailKey: strings.Repeat("k", MaxTerminationMessage)}).TerminationMessage(); err == nil ||
		!strings.Contains(err.Error(), "a termination message holds 4096") {
		t.Errorf("oversized summary: err = %v", err)
	}
}

func TestParseRestoreSummaryRejects(t *testing.T) {
	ok := `{"manifestSHA256":"` + testSHA + `","formatVersion":1,"embeddings":"Reuse"`
	cases := map[string]struct{ msg, want string }{
		"error text":     {"memory-operator restore: boom", "restore summary: invalid character"},
		"empty":          {"", "restore summary: EOF"},
		"no sha":         {`{"formatVersion":1,"embeddings":"Reuse"}`, "manifestSHA256 is not a hex SHA-256"},
		"no version":     {`{"manifestSHA256":"` + testSHA + `","embeddings":"Reuse"}`, "formatVersion 0"},
		"bad embeddings": {`{"manifestSHA256":"` + testSHA + `","formatVersion":1,"embeddings":"x"}`, `embeddings "x"`},
		"negative":       {ok + `,"restored":-1}`, "a negative count"},
		"unknown type":   {ok + `,"restoredByType":{"dream":1}}`, `unknown memory type "dream"`},
		"trailing":       {ok + `}{}`, "trailing data"},
	}
	for name, tc := range cases {
		_, err := ParseRestoreSummary(tc.msg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
