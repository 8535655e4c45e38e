#!/bin/sh
# scaleout.sh — the accounts example as three processes of one group, one of
# them killed mid-way: the commands of README.md's "Scale-out" section.
#
# Builds the example, starts the embedded broker, three processor instances
# (-role processor -group, each with its own store under the data directory
# and its own query server on 127.0.0.1:8081..8083) and the producer;
# SIGKILLs instance 3 a few seconds in; asks instance 1 for an account of
# each partition while the group rebalances; and when the producer is done
# checks every account through instance 1's query server (-role check
# -query), which forwards to the owners, against the sequential fold of the
# log, with the dead letters and the changelog.
#
# Usage: benchmarks/scaleout.sh [events] [rate] [kill-after-seconds]
#   events  events to publish (default 300000)
#   rate    events per second (default 20000)
#   kill    seconds after the producer starts to kill instance 3 (default 5)
# Environment: BROKER (default 127.0.0.1:8090) and HTTP_BASE (default
# 127.0.0.1:808, instance N on ${HTTP_BASE}N) if those ports are taken.
# Exits non-zero when the check fails; logs are kept in the data directory,
# whose name is printed.
set -u
events=${1:-300000}
rate=${2:-20000}
kill_after=${3:-5}
broker=${BROKER:-127.0.0.1:8090}
http=${HTTP_BASE:-127.0.0.1:808}
cd "$(dirname "$0")/.." || exit 1
dir=$(mktemp -d "${TMPDIR:-/tmp}/strand-scaleout.XXXXXX")
bin=$dir/accounts
echo "data and logs in $dir"
go build -o "$bin" ./examples/accounts || exit 1

pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT INT TERM

"$bin" -role broker -listen "$broker" -data "$dir" >"$dir/broker.log" 2>&1 &
pids="$pids $!"
sleep 1
for i in 1 2 3; do
	"$bin" -role processor -group -instance "$i" -iggy "$broker" -data "$dir" \
		-http "$http$i" -session-timeout 3s >"$dir/instance-$i.log" 2>&1 &
	eval "pid$i=$!"
	pids="$pids $!"
done
sleep 2
start=$(date +%s)
"$bin" -role producer -iggy "$broker" -events "$events" -rate "$rate" >"$dir/producer.log" 2>&1 &
producer=$!
pids="$pids $producer"

sleep "$kill_after"
echo "killing instance 3 (pid $pid3) with SIGKILL"
kill -9 "$pid3"
# While the group rebalances, instance 1 answers for every account: its
# own, forwarded ones, 503 with Retry-After for a partition changing hands.
for id in 1 2 3 4 5 6 7 8 9 10 11 12; do
	printf 'account %s: ' "$id"
	curl -s -o /dev/null -w '%{http_code}\n' "http://${http}1/tables/balances/$id"
done
wait "$producer"
echo "producer done after $(($(date +%s) - start))s: $(tail -n 1 "$dir/producer.log")"
curl -s "http://${http}1/group"
echo
"$bin" -role check -iggy "$broker" -query "${http}1"
status=$?
grep -h 'level=WARN\|level=ERROR' "$dir"/instance-*.log | grep -v 'dead letter' | head -n 20
exit "$status"
