package embed

import (
	"flag"
	"fmt"
)

// RolesFlags are the command-line flags that carry an embedder's roles convention:
// --embedder-roles (auto, input-type, prefix, none), --embedder-query-prefix and
// --embedder-passage-prefix. The gateway, the workers and the operator's Jobs share
// them, so that every process embedding for a store does it one way.
type RolesFlags struct {
	convention, query, passage string
}

// Register adds the flags to fs; def is --embedder-roles's default.
func (f *RolesFlags) Register(fs *flag.FlagSet, def Convention) { f.RegisterPrefixed(fs, "", def) }

// RegisterPrefixed adds the flags with their names after prefix ("serving-":
// --serving-embedder-roles), for a process that embeds for two stores or models.
func (f *RolesFlags) RegisterPrefixed(fs *flag.FlagSet, prefix string, def Convention) {
	fs.StringVar(&f.convention, prefix+"embedder-roles", def.FlagValue(), "how queries and passages reach the model: auto (probe the server), input-type, prefix or none")
	fs.StringVar(&f.query, prefix+"embedder-query-prefix", "", "with prefix: prepended to queries (default: the model family's)")
	fs.StringVar(&f.passage, prefix+"embedder-passage-prefix", "", "with prefix: prepended to passages (default: the model family's)")
}

// Roles is what the flags say, checked and Normalized (none is the zero Roles); the
// convention may be Auto. No flags at all (with an empty default) is the zero Roles.
func (f *RolesFlags) Roles() (Roles, error) {
	if f.convention == "" && f.query == "" && f.passage == "" {
		return Roles{}, nil // not given: the zero Roles, None
	}
	c, err := ParseConvention(f.convention)
	if err != nil {
		return Roles{}, fmt.Errorf("--embedder-roles: %w", err)
	}
	r := Roles{Convention: c, QueryPrefix: f.query, PassagePrefix: f.passage}
	if c != ConventionPrefix && (r.QueryPrefix != "" || r.PassagePrefix != "") {
		return Roles{}, fmt.Errorf("--embedder-query-prefix and --embedder-passage-prefix go only with --embedder-roles=prefix")
	}
	if c != ConventionAuto {
		if err := r.Validate(); err != nil {
			return Roles{}, err
		}
	}
	return r.Normalized(), nil
}

// RolesArgs renders r as the flags (nothing for the zero Roles, which the flags'
// default stands for).
func RolesArgs(r Roles) []string { return RolesArgsPrefixed("", r) }

// RolesArgsPrefixed renders r as the flags RegisterPrefixed(prefix) parses.
func RolesArgsPrefixed(prefix string, r Roles) []string {
	if r.Convention == "" {
		return nil
	}
	args := []string{"--" + prefix + "embedder-roles=" + r.Convention.FlagValue()}
	if r.QueryPrefix != "" {
		args = append(args, "--"+prefix+"embedder-query-prefix="+r.QueryPrefix)
	}
	if r.PassagePrefix != "" {
		args = append(args, "--"+prefix+"embedder-passage-prefix="+r.PassagePrefix)
	}
	return args
}
