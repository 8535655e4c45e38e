#!/bin/sh
# soak-standby.sh — failover figures of issue 28 with and without warm
# standbys (topology.WithStandbys, the accounts example's -standbys).
#
# Runs examples/accounts' TestScaleOutStandbyFigures with STRAND_SOAK=1:
# three processor instances of the accounts example (child processes) on the
# embedded broker, 8 partitions, a 4 s session timeout, the producer
# publishing; in each round the instance that joined first is SIGKILLed for
# good, and the time until every partition is served again is taken, from
# the SIGKILL and from the moment no survivor lists the dead member any more
# (detection); a new instance then joins, so each round kills one of three.
# Once without standbys (the new owners restore from the latest snapshot
# and the changelog), once with -standbys 1 (they promote their standby
# copies). Meanwhile a client reads random accounts through a survivor
# (with Strand-Max-Staleness: 10s when there are standbys) and counts the
# answers: from the owner, stale from a standby, failed. p50 and max are
# logged, and every account, dead letter and the changelog are checked at
# the end of each. About 5 minutes.
#
# Usage: benchmarks/soak-standby.sh [rounds] [snapshot-every]
#   rounds          SIGKILLs per mode (default 8)
#   snapshot-every  -snapshot-every of the instances (default 200; 0: no
#                   snapshots, a restore without a standby replays the
#                   whole changelog)
# Environment: RACE=1 builds with -race.
set -eu
rounds=${1:-8}
snap=${2:-200}
cd "$(dirname "$0")/.."
race=""
[ "${RACE:-0}" = 1 ] && race="-race"
uptime
STRAND_SOAK=1 STRAND_FAILOVER_ROUNDS="$rounds" STRAND_FAILOVER_SNAPSHOT_EVERY="$snap" exec go test $race -count=1 -v -timeout 30m \
	-run 'TestScaleOutStandbyFigures' ./examples/accounts/
