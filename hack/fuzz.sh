#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (go test -fuzz takes one
# target at a time). `make test` gives each a short fixed budget; `make fuzz` a longer
# one. A failing input is saved under the package's testdata/fuzz and fails the run.
#
#   FUZZTIME=2s hack/fuzz.sh      # make test
#   FUZZTIME=2m hack/fuzz.sh      # make fuzz (the default here: 60s)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
FUZZTIME=${FUZZTIME:-60s}
failed=0
while IFS=: read -r file name; do
	pkg="./$(dirname "$file")"
	printf '[fuzz] %s %s (%s)\n' "$pkg" "$name" "$FUZZTIME" >&2
	if ! go test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" >/tmp/fuzz.$$.log 2>&1; then
		cat /tmp/fuzz.$$.log >&2
		failed=1
	fi
done < <(grep -rHoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's|^\./||; s|:func |:|' | sort)
rm -f /tmp/fuzz.$$.log
exit $failed
