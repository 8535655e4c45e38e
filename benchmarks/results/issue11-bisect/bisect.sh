#!/bin/sh
# bisect.sh ROUNDS OUTDIR TESTBIN... — the interleaved rounds behind
# HISTORY.md §13: each round runs BenchmarkAccounts' strand-binary and
# strand-pipelined-binary (1,000,000 events, one run each) with every test
# binary in turn, and appends the result lines to OUTDIR/<binary>.txt, one
# file per binary, for benchstat. Build each binary at its commit with
#   go test -c -o t-<commit>.test ./stream/topology/
# and run this from the repository root.
set -eu
rounds=$1
out=$2
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
bins=""
for b in "$@"; do bins="$bins $(cd "$(dirname "$b")" && pwd)/$(basename "$b")"; done
cd stream/topology
for r in $(seq 1 "$rounds"); do
	for b in $bins; do
		n=$(basename "$b" .test)
		echo "round $r $n load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/log.txt"
		"$b" -test.run '^$' -test.bench 'Accounts/strand-(pipelined-)?binary$' -test.benchtime 1x 2>&1 |
			grep -E '^Benchmark' | sed 's/-2 / /' >>"$out/$n.txt"
	done
done
