#!/bin/sh
# soak-failover.sh — failover figures of issue 28 (static membership).
#
# Runs examples/accounts' TestScaleOutFailoverFigures with STRAND_SOAK=1:
# three processor instances of the accounts example (child processes) on the
# embedded broker, 8 partitions, a 4 s session timeout, the producer
# publishing; in each round one instance is SIGKILLed and started again at
# once with the same -instance (same store; with -static, the default, the
# same instance id), and the time until every partition is served again is
# taken. Once with static membership, once without (-static=false), and once
# killing an instance for good (the others take over after the session
# timeout and restore from the changelog; a new instance is added); p50 and
# max of each are logged, and every account, dead letter and the changelog
# are checked at the end. Then TestScaleOutBrokerRestart: the broker down
# for three session timeouts, three times (every lease expires; every
# instance joins again and regains its partitions). About 3 minutes.
#
# Usage: benchmarks/soak-failover.sh [rounds]
#   rounds  SIGKILL+restart rounds per mode (default 8)
# Environment: RACE=1 builds with -race.
set -eu
rounds=${1:-8}
cd "$(dirname "$0")/.."
race=""
[ "${RACE:-0}" = 1 ] && race="-race"
uptime
STRAND_SOAK=1 STRAND_FAILOVER_ROUNDS="$rounds" exec go test $race -count=1 -v -timeout 30m \
	-run 'TestScaleOutFailoverFigures|TestScaleOutBrokerRestart' ./examples/accounts/
