#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (go test -fuzz takes one
# target at a time). `make test` gives each a fixed number of inputs; `make fuzz` a
# longer time. A failing input is saved under the package's testdata/fuzz and fails
# the run.
#
#   FUZZTIME=5000x hack/fuzz.sh   # make test: a count, which no deadline can cut short
#   FUZZTIME=2m hack/fuzz.sh      # make fuzz (the default here: 60s)
#
# Go 1.26's fuzz coordinator can report its own stop at a -fuzztime duration as a
# failure, "context deadline exceeded", with no failing input (golang/go#75804, fixed
# in Go 1.27). A count never takes that path; with a duration, such a failure that
# saved no input is reported as that race and does not fail the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME=${FUZZTIME:-60s}
failed=0
while IFS=: read -r file name; do
	pkg="./$(dirname "$file")"
	corpus="$(dirname "$file")/testdata/fuzz/$name"
	before=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
	printf '[fuzz] %s %s (%s)\n' "$pkg" "$name" "$FUZZTIME" >&2
	if ! go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" >/tmp/fuzz.$$.log 2>&1; then
		after=$( (ls "$corpus" 2>/dev/null || true) | wc -l)
		if [[ $FUZZTIME != *x ]] && [ "$after" -eq "$before" ] && grep -q 'context deadline exceeded' /tmp/fuzz.$$.log; then
			printf '[fuzz] %s %s: the coordinator'"'"'s deadline race (golang/go#75804), no failing input: not a failure\n' "$pkg" "$name" >&2
			continue
		fi
		cat /tmp/fuzz.$$.log >&2
		failed=1
	fi
done < <(grep -rHoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's|^\./||; s|:func |:|' | sort)
rm -f /tmp/fuzz.$$.log
exit $failed
