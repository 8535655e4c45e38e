#!/bin/sh
# scaleout-bench.sh — the scale-out measurements of issue 14 (HISTORY.md §16), in
# full: restore of one partition holding 100,000 and 1,000,000 accounts by a
# new owner, from the changelog alone and from snapshots, after 1, 2 and 4
# events per key, against processing the log from scratch; the rebalance
# pause after a SIGKILL of one of three instance processes (session timeouts
# 1s, 2s, 5s and the default 10s), against a clean stop; the throughput of
# 1, 2 and 3 instance processes (and one outside any group) over 2,000,000
# events, with CPU per event of every process; the query server's latency
# for local and forwarded gets with 1 and 4 clients. Three rounds each,
# interleaved with their baselines. Not part of CI: about an hour on 2 cores.
#
# Usage: benchmarks/scaleout-bench.sh [extra runner flags...]
#   e.g. benchmarks/scaleout-bench.sh -scaleout-parts pause,query -reps 1
set -eu
cd "$(dirname "$0")/.."
uptime
exec go run ./benchmarks -scenario scaleout -reps 3 -codecs binary \
	-scaleout-keys 100000,1000000 -scaleout-history 1,2,4 -scaleout-snapshot-every 20 \
	-scaleout-sessions 1s,2s,5s,10s -scaleout-pause-instances 3 -scaleout-rate 20000 -scaleout-base 100000 \
	-events 2000000 -accounts 10000 -skew 1.1 -partitions 8 -scaleout-instances 1,2,3 \
	-scaleout-queries 20000 -scaleout-clients 1,4 "$@"
