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

func TestSnapshotArgsRoundTrip(t *testing.T) {
	cases := []SnapshotConfig{
		{
			StoreNamespace: "team-a", StoreName: "bot", Tenant: "acme", SnapshotName: "nightly",
			Schema: "mem_acme", Vectors: engine.Vectors{VectorEngine: "Milvus", MilvusAddress: "milvus:19530", Collection: "mem_acme"},
			EmbeddingModel: "all-MiniLM-L6-v2", Dimension: 384, Metric: "COSINE",
			EmbedderRoles: embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "},
			Destination:   Destination{Endpoint: "s3.example:443", Region: "eu-1", Bucket: "mem", Prefix: "a/b/"},
			Scopes:        []string{"user:1024", "session:*"}, Types: []string{"semantic", "episodic"},
			ActiveWithin: 720 * time.Hour, IncludeEmbeddings: true, CompressionLevel: 3,
		},
		{
			Schema: "mem_x", Vectors: engine.Vectors{VectorEngine: "Postgres"}, Metric: "L2", Dimension: 8,
			Destination:      Destination{Endpoint: "127.0.0.1:9000", Insecure: true, Bucket: "b", Prefix: "p/"},
			CompressionLevel: 1, Unencrypted: true, ShardTargetBytes: 1 << 20,
		},
	}
	for _, want := range cases {
		got, err := ParseSnapshotArgs(want.Args(), io.Discard)
		if err != nil {
			t.Fatalf("ParseSnapshotArgs(%v): %v", want.Args(), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
}

func TestSnapshotArgsRejectsBadInput(t *testing.T) {
	base := []string{"--schema=s", "--s3-endpoint=e:1", "--bucket=b", "--prefix=p/"}
	cases := map[string]struct {
		args []string
		want string
	}{
		"missing":            {[]string{"--schema=s"}, "missing required flags: --bucket, --prefix, --s3-endpoint"},
		"prefix without /":   {append(base[:3:3], "--prefix=p"), "--prefix must end in '/'"},
		"compression":        {append(base, "--compression-level=0"), "outside 1..19"},
		"milvus needs place": {append(base, "--vector-engine=Milvus", "--include-embeddings"), "needs --milvus-address"},
		"unknown flag":       {append(base, "--bogus"), "flag provided but not defined"},
	}
	for name, tc := range cases {
		_, err := ParseSnapshotArgs(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

// A snapshot's scope selection, spelled decomposed (NFD), selects the NFC scopes the
// store holds, exactly and by prefix.
func TestExportFilterNormalisesScopes(t *testing.T) {
	f, err := exportFilter(SnapshotConfig{Scopes: []string{"user:zoe\u0308", "session:ユーザー/e\u0301*"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Scopes) != 1 || f.Scopes[0] != "user:zo\u00eb" || len(f.ScopePrefixes) != 1 || f.ScopePrefixes[0] != "session:ユーザー/\u00e9" {
		t.Fatalf("filter %q %q", f.Scopes, f.ScopePrefixes)
	}
}
