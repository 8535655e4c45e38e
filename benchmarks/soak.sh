#!/bin/sh
# soak.sh — the soak variants of every package's tests, in one command.
#
# `go test -race ./...` (the newcomer's suite, README.md) runs short variants:
# a few kills per crash test, 50 rapid cases per property test, a few seeds of
# the generative tests. STRAND_SOAK=1 gives every test its full length: crash
# tests kill hundreds of times with goroutines burning every CPU beside them
# and assert that the kills covered every kill point
# (stream/topology/topologytest/crashtest), property tests run 500 cases, the
# generative tests many seeds, and the measurements that only a soak asserts
# (connection drops, linger, rebalance figures) run. This script runs them
# for every package whose tests read STRAND_SOAK (found in the source, so a
# new soak test is picked up), one package at a time, and prints each
# package's time and verdict.
#
# Usage: benchmarks/soak.sh [packages...]
#   packages  e.g. ./stream/topology ./examples/accounts (default: every
#             package whose tests read STRAND_SOAK or use crashtest's soak
#             knobs)
# Environment:
#   RACE=0           builds without -race (faster, finds no data races)
#   STRAND_SOAK_KILLS=n  kills per crash test (crashtest.Kills)
#   TIMEOUT=4h       go test -timeout per package
#   RUN=regexp       go test -run (e.g. RUN=Crash)
# Takes hours on 2 cores with -race; exits non-zero if a package failed, after
# running all of them, and names the failed ones. Every package's output is
# kept in a temporary directory whose name is printed.
set -u
cd "$(dirname "$0")/.." || exit 1
race="-race"
if [ "${RACE:-1}" = 0 ]; then race=""; fi
timeout=${TIMEOUT:-4h}
if [ "$#" -gt 0 ]; then
	pkgs="$*"
else
	pkgs=$(grep -rlE --include='*_test.go' 'STRAND_SOAK|crashtest\.(Soak|Kills|Coverage|Hogs)\(' . |
		xargs -n1 dirname | sort -u)
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
echo "soak run of $(echo "$pkgs" | wc -w) packages, outputs in $logs; started $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
failed=""
for p in $pkgs; do
	log="$logs/$(echo "$p" | tr '/.' '__').log"
	t0=$(date +%s)
	STRAND_SOAK=1 go test $race -count=1 -timeout "$timeout" ${RUN:+-run "$RUN"} -v "$p" >"$log" 2>&1
	status=$?
	t1=$(date +%s)
	if [ "$status" -eq 0 ]; then
		echo "ok   $p  $((t1 - t0)) s"
	else
		echo "FAIL $p  $((t1 - t0)) s (exit $status); last lines of $log:"
		grep -E '^(--- FAIL|FAIL|panic:)|_test.go:[0-9]+:' "$log" | tail -n 30
		failed="$failed $p"
	fi
done
echo "finished $(date -u +%H:%M:%S) UTC"
if [ -n "$failed" ]; then
	echo "failed:$failed"
	exit 1
fi
