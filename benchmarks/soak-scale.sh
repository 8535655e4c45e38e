#!/bin/sh
# soak-scale.sh — the long run of issue 17: 50,000,000 events over
# 1,000,000 accounts (Zipf 1.01, every account touched), strand alone, sync
# commits, with a sample every second (events, RSS, Go heap, store size,
# compaction debt, write stalls) written to a CSV file, and the throughput
# of each tenth of the events in the table. Not part of CI: it takes
# several minutes (the input alone, 400 MB off the Go heap, takes about a
# minute to build on 2 cores).
#
# Usage: benchmarks/soak-scale.sh [events] [keys] [extra runner flags...]
#   events  events in the run (default 50000000)
#   keys    accounts touched (default 1000000)
# The samples go to ${TMPDIR:-/tmp}/strand-soak-scale-<size>-binary.csv.
set -eu
events=${1:-50000000}
keys=${2:-1000000}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
cd "$(dirname "$0")/.."
uptime
exec go run ./benchmarks -scenario scale -scale-keys "$keys" -scale-skews 1.01 -events "$events" \
	-scale-variants strand -codecs binary -scale-timeline "${TMPDIR:-/tmp}/strand-soak-scale" "$@"
