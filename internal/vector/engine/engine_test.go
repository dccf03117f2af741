package engine

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestVectorsArgsRoundTrip(t *testing.T) {
	for _, v := range []Vectors{
		{VectorEngine: Postgres},
		{VectorEngine: PGVector, EfSearch: 200, ExactBelow: 5000},
		{VectorEngine: Milvus, MilvusAddress: "milvus:19530", Collection: "mem_acme"},
	} {
		var got Vectors
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		got.Register(fs)
		if err := fs.Parse(v.Args()); err != nil {
			t.Fatalf("%+v: %v", v, err)
		}
		if got != v {
			t.Errorf("Args of %+v parse back as %+v", v, got)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%+v: %v", v, err)
		}
	}
}

func TestVectorsValidate(t *testing.T) {
	for _, tc := range []struct {
		v    Vectors
		want string
	}{
		{Vectors{VectorEngine: "Faiss"}, `want Postgres, PGVector or Milvus`},
		{Vectors{VectorEngine: Milvus, MilvusAddress: "m:1"}, "needs --milvus-address and --collection"},
		{Vectors{VectorEngine: PGVector, EfSearch: -1}, "must not be negative"},
	} {
		err := tc.v.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.v, err, tc.want)
		}
	}
	if err := (Vectors{VectorEngine: Milvus}).ValidateEngine(); err != nil {
		t.Errorf("ValidateEngine of a Milvus engine without address: %v (a snapshot without vectors needs none)", err)
	}
}
