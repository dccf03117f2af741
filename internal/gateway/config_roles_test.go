package gateway

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
)

// TestConfigDedupAndRolesFlags: a standalone gateway calibrates its threshold and
// probes its roles by default; the operator's explicit values survive Args/ParseArgs.
func TestConfigDedupAndRolesFlags(t *testing.T) {
	base := []string{"--schema=s", "--keys-file=k", "--dimension=8"}
	c, err := ParseArgs(base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.DedupAuto || c.DedupThreshold != 0 || c.EmbedderRoles.Convention != embed.ConventionAuto {
		t.Fatalf("defaults: dedup auto %v %v, roles %v; want auto and auto", c.DedupAuto, c.DedupThreshold, c.EmbedderRoles)
	}
	for _, want := range []Config{
		{DedupThreshold: 0.9843, EmbedderRoles: embed.Roles{Convention: embed.ConventionInputType}},
		{DedupThreshold: 0, EmbedderRoles: embed.Roles{}},
		{DedupAuto: true, EmbedderRoles: embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}},
	} {
		want.Schema, want.KeysFile, want.Dimension = "s", "k", 8
		want.Listen, want.Embedder, want.VectorEngine, want.Metric = DefaultListen, "Hashing", "Postgres", "COSINE"
		want.RateLimit, want.RateBurst, want.MaxBodyBytes = 1, 1, 1024
		want = want.WithDefaults()
		got, err := ParseArgs(want.Args(), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", want.Args(), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
		}
	}
	for args, msg := range map[string]string{
		"--dedup-threshold=lots":                                 "want auto or a number",
		"--dedup-threshold=1.5":                                  "outside [0, 1]",
		"--embedder-roles=sideways":                              "want auto, input-type, prefix or none",
		"--embedder-roles=input-type --embedder-query-prefix=q:": "only with --embedder-roles=prefix",
	} {
		_, err := ParseArgs(append(base, strings.Split(args, " ")...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", args, err, msg)
		}
	}
}
