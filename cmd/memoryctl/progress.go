package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/amemory/memory-operator/internal/importer"
)

// progress shows a long import's counts on one line of a terminal, rewritten at most
// every progressEvery; written to anything else (a pipe, a file, a log) it shows
// nothing, so scripts see only the final summary on stdout.
type progress struct {
	w     io.Writer // nil: not a terminal
	start time.Time
	last  time.Time
}

const progressEvery = 250 * time.Millisecond

func newProgress(stderr io.Writer, start time.Time) *progress {
	p := &progress{start: start, last: start}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.w = stderr
	}
	return p
}

// update is importer.LangGraphOptions.Progress.
func (p *progress) update(st importer.Stats) {
	if p.w == nil {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.print(st, now)
	}
}

// done ends the progress line with the final counts (on a terminal).
func (p *progress) done(st importer.Stats) {
	if p.w == nil {
		return
	}
	p.print(st, time.Now())
	fmt.Fprintln(p.w)
}

func (p *progress) print(st importer.Stats, now time.Time) {
	// \r and "erase to end of line": the line is rewritten in place.
	fmt.Fprintf(p.w, "\r\x1b[Kimporting: %s", progressLine(st, now.Sub(p.start)))
}

// progressLine is the counts and the rate of threads read.
func progressLine(st importer.Stats, elapsed time.Duration) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(st.Threads) / s
	}
	return fmt.Sprintf("%d threads (%d imported), %d messages, %d memories, %d store items; %.0f threads/s, %s",
		st.Threads, st.Imported, st.Messages, st.Items, st.StoreItems, rate, elapsed.Round(time.Second))
}
