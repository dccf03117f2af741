package worker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/importer"
)

// TestLeftOutFitsTheTerminationMessage: however many kinds of data an import left out,
// and however long their names (an app's own state channels), the restore's summary
// fits in a termination message, every count kept.
func TestLeftOutFitsTheTerminationMessage(t *testing.T) {
	var l []importer.LeftOut
	var total int64
	for i := range 40 {
		l = append(l, importer.LeftOut{What: fmt.Sprintf("threads holding state channel %s%d, unmapped", strings.Repeat("ß", 120), i), Count: int64(i + 1)})
		total += int64(i + 1)
	}
	bounded := boundLeftOut(l)
	var sum int64
	for _, k := range bounded {
		sum += k.Count
		if len(k.What) > maxLeftOutWhat+len("…") {
			t.Fatalf("%d bytes: %q", len(k.What), k.What)
		}
	}
	if len(bounded) != maxLeftOutKinds+1 || sum != total || !strings.HasPrefix(bounded[maxLeftOutKinds].What, "30 more kinds") {
		t.Fatalf("%d kinds, %d counted of %d: %+v", len(bounded), sum, total, bounded[maxLeftOutKinds])
	}
	st := importer.Stats{Threads: 1 << 40, FirstProblem: strings.Repeat("x", maxFirstInvalid), LeftOut: bounded}
	sum2 := RestoreSummary{ManifestSHA256: strings.Repeat("ab", 32), FormatVersion: 4, Embeddings: "Reuse", Import: &st,
		FirstInvalid: strings.Repeat("y", maxFirstInvalid), Read: 1 << 40, Restored: 1 << 40}
	if _, err := sum2.TerminationMessage(); err != nil {
		t.Fatal(err)
	}
	if boundLeftOut(nil) != nil {
		t.Fatal("no kinds became some")
	}
}
