#!/bin/sh
# soak-metamorphic.sh — the long run of the generative (metamorphic) tests.
#
# Runs internal/metamorphic's TestMeta with STRAND_SOAK=1: many random
# topologies (1–3 inputs, foreign sources, KeyBy chains, To, ForEach, fences,
# reductions, the re-sequencer, poison records, failing handlers), each run
# through the real App by the broker-free driver with random batchings,
# partition counts and restarts, and compared with the reference model of the
# documented guarantees. The first seed comes from the clock and is printed;
# a failure prints the seed, the case, the first differences and the one line
# that replays it.
#
# Usage: benchmarks/soak-metamorphic.sh [seeds] [extra go test flags...]
#   seeds  how many seeds (default 2000: about 8 minutes on 2 cores)
#   extra  e.g. -meta.shared-tables -meta.isolation (capabilities that are
#          off by default until their fix lands), -meta.duration=30m,
#          -meta.first=12345, -meta.groups-only (only the cases that run
#          as a group of instances: design §17)
# Environment: RACE=1 builds with -race (slower; finds data races too).
set -u
seeds=${1:-2000}
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.." || exit 1
race=""
if [ "${RACE:-}" = 1 ]; then race="-race"; fi
log=$(mktemp "${TMPDIR:-/tmp}/soak-metamorphic.XXXXXX")
echo "metamorphic soak: $seeds seeds (log: $log)"
STRAND_SOAK=1 STRAND_META_SEEDS="$seeds" go test $race -count=1 -timeout 4h -v \
	-run '^TestMeta$' ./internal/metamorphic/ "$@" >"$log" 2>&1
status=$?
grep -E 'meta_test.go:[0-9]+: (seeds|stopped)|^(ok|FAIL)' "$log"
if [ "$status" -ne 0 ]; then
	echo "metamorphic soak FAILED; the failing seed's output:"
	# The lines from the last "=== RUN" before the first "--- FAIL".
	awk '/^=== RUN/ { buf = "" } { buf = buf $0 "\n" } /--- FAIL/ { printf "%s", buf; exit }' "$log" | head -n 150
	exit "$status"
fi
rm -f "$log"
