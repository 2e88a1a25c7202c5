#!/usr/bin/env bash
# Runs every fuzz target of the module briefly, one after another, and
# stops at the first failure (the failing input is then written to the
# package's testdata/fuzz/<Target>/, where it stays as a regression seed).
#
# Targets are found by name, so new ones need no change here: every
# `func FuzzX(f *testing.F)` in a _test.go file. A file with a build
# constraint is skipped (its target may not be built by default).
#
# FUZZTIME (a go test -fuzztime value) sets each target's time; by default
# the run is kept under about two minutes: 100 s shared between the
# targets, 4 s at most and 2 s at least each. Each package's test binary
# is built once (go test -c -fuzz), and run once per target as
# `go test -run '^$' -fuzz '^FuzzX$' -fuzztime T ./pkg/` would run it
# (linking per target cost 2 s or more each), but with a fuzz cache of its
# own, emptied after: the inputs go test -fuzz gathers in $GOCACHE/fuzz
# grow from run to run, and replaying them took all of a few seconds' run
# (264 of them, on a loaded machine), which then never got to fuzz. The
# committed corpus (testdata/fuzz) and the f.Add seeds are replayed first.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
pattern='^func (Fuzz[A-Za-z0-9_]*)\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)'

targets=() # "dir name", grouped by package
skipped=0
while IFS= read -r file; do
	if grep -q '^//go:build' "$file"; then
		skipped=$((skipped + $(grep -cE "$pattern" "$file")))
		continue
	fi
	dir=$(dirname "$file")
	while IFS= read -r name; do
		targets+=("$dir $name")
	done < <(sed -nE "s/${pattern}.*/\\1/p" "$file")
done < <(grep -rlE --include='*_test.go' --exclude-dir=node_modules --exclude-dir=vendor --exclude-dir=testdata "$pattern" . | sort)

count=${#targets[@]}
if [ "$count" -eq 0 ]; then
	echo "fuzz-all: no fuzz targets found"
	exit 0
fi
if [ -z "${FUZZTIME:-}" ]; then
	secs=$((100 / count))
	secs=$((secs > 4 ? 4 : secs < 2 ? 2 : secs))
	FUZZTIME=${secs}s
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache="$bin/cache"
start=$SECONDS
passed=0
built=""
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	exe="$bin/$(echo "$dir" | tr '/.' '__').test"
	if [ "$built" != "$dir" ]; then
		if ! $GO test -c -fuzz . -o "$exe" "$dir/"; then
			echo "fuzz-all: FAIL building $dir/ ($passed of $count passed, $((SECONDS - start)) s)"
			exit 1
		fi
		built=$dir
		importpath=$($GO list "$dir/")
	fi
	echo "fuzz-all: $name in $dir/ for $FUZZTIME"
	corpus="$dir/testdata/fuzz/$name"
	before=$(ls "$corpus" 2>/dev/null | sort || true)
	out="$bin/out.txt"
	if ! (cd "$dir" && "$exe" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$FUZZTIME" \
		-test.fuzzcachedir "$cache/$importpath" -test.timeout 10m -test.paniconexit0) >"$out" 2>&1; then
		cat "$out"
		after=$(ls "$corpus" 2>/dev/null | sort || true)
		# Go's own coordinator can report its -fuzztime deadline as a
		# failure on a loaded machine (golang/go#75804, fixed in Go 1.27):
		# a bare "context deadline exceeded" and no failing input written.
		if [ "$before" = "$after" ] && grep -qx '    context deadline exceeded' "$out" && ! grep -q 'Failing input written' "$out"; then
			echo "fuzz-all: $name stopped on Go's fuzztime deadline race (golang/go#75804), no failing input: not a finding"
		else
			echo "fuzz-all: FAIL $name in $dir/ ($passed of $count passed before it, $((SECONDS - start)) s; the input is in $corpus/)"
			exit 1
		fi
	else
		tail -n 3 "$out"
	fi
	passed=$((passed + 1))
done
note=""
if [ "$skipped" -gt 0 ]; then
	note=", $skipped skipped (build constraint)"
fi
echo "fuzz-all: ok, $count fuzz targets, $FUZZTIME each, in $((SECONDS - start)) s$note"
