#!/bin/sh
# soak-accounts.sh — the long crash soak of the accounts example.
#
# Runs examples/accounts' TestCrashKill with STRAND_SOAK=1: the processor runs
# as a child process and is SIGKILLed hundreds of times (at random moments,
# while a batch executes and commits, right after a commit, and around the
# publication of dead letters) while the producer keeps publishing events and
# poison records to the embedded broker, which lives in the test process with
# a data directory; afterwards every balance must equal the sequential fold of
# the log read back from the broker, and every poison record must be in the
# dead-letter topic exactly once.
#
# Usage: benchmarks/soak-accounts.sh [kills] [rounds]
#   kills   kills per round (default 300: about 2.5 minutes on 2 cores)
#   rounds  rounds, each on fresh data (default 1)
# Environment: RACE=1 builds with -race (slower; finds data races too).
# Exits non-zero on the first failing round and prints its log's tail; the
# full log is kept in a temporary file whose name is printed.
set -u
kills=${1:-300}
rounds=${2:-1}
cd "$(dirname "$0")/.." || exit 1
race=""
if [ "${RACE:-}" = 1 ]; then race="-race"; fi
log=$(mktemp "${TMPDIR:-/tmp}/soak-accounts.XXXXXX")
i=1
while [ "$i" -le "$rounds" ]; do
	echo "soak round $i/$rounds: $kills kills (log: $log)"
	STRAND_SOAK=1 STRAND_SOAK_KILLS="$kills" go test $race -count=1 -timeout 2h -v \
		-run '^TestCrashKill$' ./examples/accounts/ >"$log" 2>&1
	status=$?
	grep -E 'crash_test.go:[0-9]+: [0-9]+ kills|dead letters:|check: |^(--- |ok|FAIL)' "$log"
	if [ "$status" -ne 0 ]; then
		echo "soak round $i FAILED; last lines of $log:"
		tail -n 60 "$log"
		exit "$status"
	fi
	i=$((i + 1))
done
rm -f "$log"
