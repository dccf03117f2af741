package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// help is what `memoryctl CMD -h` prints above the flags: how the command is called,
// what it does, and examples that run as written (TestDocumentedCommands runs them).
type help struct {
	synopsis string // after "usage: memoryctl "
	about    string
	examples string
}

// newFlagSet is a command's flag set, writing errors and help to stderr.
func newFlagSet(name string, h help, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: memoryctl %s\n\n%s\n", h.synopsis, strings.TrimSpace(h.about))
		if h.examples != "" {
			fmt.Fprintf(w, "\nExamples:\n%s\n", indent(strings.TrimSpace(h.examples), "  "))
		}
		fmt.Fprintf(w, "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(s, "\n", "\n"+by)
}

// parseInterspersed parses flags wherever they stand among the arguments (the
// standard flag package stops at the first argument that is not a flag), so
// `memoryctl inspect ./pkg --scopes` reads as `memoryctl inspect --scopes ./pkg`.
// "--" ends the flags. It returns the arguments that are not flags, in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// fs.Parse stops before a non-flag, or after a "--" it consumed.
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}
