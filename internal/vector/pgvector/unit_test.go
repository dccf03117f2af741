package pgvector

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

func TestParams(t *testing.T) {
	d := DefaultParams()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if got := (Params{}).WithDefaults(); got != d {
		t.Fatalf("zero params with defaults = %+v, want %+v", got, d)
	}
	// ef_construction follows a large m up to 2*m.
	if got := (Params{M: 80}).WithDefaults(); got.EfConstruction != 160 || got.Validate() != nil {
		t.Fatalf("m 80 with defaults = %+v (%v)", got, got.Validate())
	}
	for _, p := range []Params{
		{M: 2, EfConstruction: 4, EfSearch: 1, ExactBelow: 1},
		{M: 100, EfConstruction: 1000, EfSearch: 1000, ExactBelow: 1_000_000},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range []Params{
		{M: 1, EfConstruction: 64, EfSearch: 40, ExactBelow: 1},
		{M: 101, EfConstruction: 1000, EfSearch: 40, ExactBelow: 1},
		{M: 16, EfConstruction: 31, EfSearch: 40, ExactBelow: 1},
		{M: 16, EfConstruction: 1001, EfSearch: 40, ExactBelow: 1},
		{M: 16, EfConstruction: 64, EfSearch: 0, ExactBelow: 1},
		{M: 16, EfConstruction: 64, EfSearch: 1001, ExactBelow: 1},
		{M: 16, EfConstruction: 64, EfSearch: 40, ExactBelow: 0},
		{M: 16, EfConstruction: 64, EfSearch: 40, ExactBelow: 1_000_001},
	} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v: accepted", p)
		}
	}
}

// TestRaiseEf: the next walk asks for what the share seen needs for k matches, with a
// margin, at least twice the last, never above pgvector's maximum.
func TestRaiseEf(t *testing.T) {
	for _, tc := range []struct{ ef, got, k, want int }{
		{100, 50, 64, 200},  // half the store: twice (1.25*64/50*100 = 160 is less)
		{100, 10, 64, 800},  // a tenth: 100*64/10 = 640, plus a quarter
		{40, 2, 10, 250},    // 5%: 40*10/2 = 200, plus a quarter
		{100, 0, 64, 400},   // nothing seen: four times
		{400, 3, 64, 1000},  // capped
		{1000, 1, 10, 1000}, // at the cap it stays (Search stops there)
		{64, 63, 64, 128},   // one short: twice
		{1, 1, 2, 3},        // 1*2*1.25 = 2.5, rounded up
	} {
		if got := raiseEf(tc.ef, tc.got, tc.k); got != tc.want {
			t.Errorf("raiseEf(%d, %d, %d) = %d, want %d", tc.ef, tc.got, tc.k, got, tc.want)
		}
	}
}

func TestVersions(t *testing.T) {
	for v, ok := range map[string]bool{"0.5.0": true, "0.6.2": true, "0.8.0": true, "1.0": true, "0.4.4": false, "0.4": false, "x": false, "": false} {
		err := checkVersion(v, "the extension", "update it")
		if (err == nil) != ok {
			t.Errorf("version %q: err = %v", v, err)
		}
		if err != nil && (!errors.Is(err, ErrExtensionMissing) || !strings.Contains(err.Error(), v)) {
			t.Errorf("version %q: %v does not wrap ErrExtensionMissing naming the version", v, err)
		}
	}
}

func TestCodecs(t *testing.T) {
	v := []float32{1, -0.5, 1e-30, 3.4028235e38, float32(math.Pi), -0}
	if got := TextVector(v); got != "[1,-0.5,1e-30,3.4028235e+38,3.1415927,0]" {
		t.Fatalf("text = %s", got)
	}
	b := binaryVector(v)
	if len(b) != 4+4*len(v) || b[0] != 0 || b[1] != byte(len(v)) || b[2] != 0 || b[3] != 0 {
		t.Fatalf("binary header % x", b[:4])
	}
	if _, err := decodeReals(nil, []byte{0, 0, 0, 1}); err == nil {
		t.Fatal("short real[] accepted")
	}
	if s := score(vector.L2, []float32{1, 2}, []float32{1, 2}); s != 0 || math.Signbit(float64(s)) {
		t.Fatalf("L2 of equal vectors scores %v", s)
	}
}
