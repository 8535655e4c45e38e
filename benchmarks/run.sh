#!/bin/sh
# Runs every benchmark scenario at the sizes of issues 5 and 6 and prints the
# table (see README.md; current figures in RESULTS.md). Extra arguments go to the runner, e.g.
#   benchmarks/run.sh -reps 3 -cpuprofile /tmp/strand
#   benchmarks/run.sh -broker disk
# Scenarios: core (1,000,000 events, no broker, binary and JSON), e2e (the
# same through the embedded broker), latency (producer paced at 50% of the
# e2e peak, and at 25%, for 20 s), restart (a store of 1,000,000 keys reopened).
set -eu
cd "$(dirname "$0")/.."
uptime
exec go run ./benchmarks -scenario all -events 1000000 -accounts 10000 -skew 1.1 \
	-partitions 8 -batch 5000 -codecs binary,json -restart-keys 1000000 \
	-latency-share 0.25,0.5 -latency-duration 20s "$@"
