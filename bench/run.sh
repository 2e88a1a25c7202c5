#!/usr/bin/env bash
# Side-by-side benchmark: presenced against the Node peer (bench/server.js), same scenarios,
# same machine, same Redis setup. The servers take turns scenario by scenario, in two rounds
# that swap the order (presenced idle, Node idle, Node idle, presenced idle, presenced
# heartbeat, Node heartbeat, Node heartbeat, presenced heartbeat, …): a machine that gets
# slower or faster during the run (other programs, a shared host) weighs on both alike.
#
#   bench/run.sh            # the default run, about 20 minutes
#   bench/run.sh -quick     # smoke run, one round, about 3-4 minutes
#   bench/run.sh -quick -typing-nodes 1    # extra flags go to every presence-load run
#   BENCH_ROUNDS=1 bench/run.sh            # one round (presenced first), about 10 minutes
#
# Results: bin/bench/<UTC time>/ (BENCH_OUT overrides it): <server>-<scenario>[-r<round>].{json,txt},
# compare.txt and compare.md (each figure the mean of the rounds, with each round's value).
# Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${BENCH_OUT:-bin/bench/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"

echo "building bin/presenced and bin/presence-load" >&2
go build -o bin/presenced ./cmd/presenced
go build -o bin/presence-load ./cmd/presence-load
echo "npm ci in bench/" >&2
(cd bench && npm ci --no-audit --no-fund --loglevel=error >&2)

quick=0
for a in "$@"; do if [ "$a" = "-quick" ] || [ "$a" = "--quick" ]; then quick=1; fi; done
rounds=${BENCH_ROUNDS:-2}
if [ "$quick" = 1 ]; then
	rounds=${BENCH_ROUNDS:-1}
	flags=(-redis own -inflight 500 -connect-rate 100000)
else
	# (a) memory at 10,000 idle sockets and 5,000 sockets x 3 conversations, (b) heartbeat
	# rate at p99 <= 50 ms, (c) typing 20 rooms x 100 members at 500/s on 1 and 2 nodes,
	# (d) join burst: 500 in flight, join right after connect, (e) connect rate,
	# (f) presence:query of 1,000 ids, (g) status updates to 1,000 subscribers
	flags=(-redis own -inflight 500 -connect-rate 100000
		-idle-n 10000 -n 5000 -convs 3 -rates 2k,5k,7500,10k,15k,20k,30k,40k,50k,60k -step-duration 10s -baseline 5s
		-typing-rooms 20 -typing-members 100 -typing-rates 100,500 -typing-duration 20s
		-subscribers 1000 -flaps 10 -queries 500 -query-sizes 1000)
fi

status=0
lists=([0]="" [1]="")
for scenario in idle heartbeat typing subscribe; do
	for round in $(seq 1 "$rounds"); do
		order=(presenced node)
		if [ $((round % 2)) = 0 ]; then order=(node presenced); fi
		for server in "${order[@]}"; do
			i=0
			if [ "$server" = node ]; then i=1; fi
			base="$out/$server-$scenario"
			if [ "$rounds" -gt 1 ]; then base+="-r$round"; fi
			echo "== $scenario against $server, round $round of $rounds ($(date -u +%H:%M:%S)) ==" >&2
			if ! ./bin/presence-load -server "$server" -scenario "$scenario" "${flags[@]}" "$@" -json -out "$base.txt" >"$base.json" 2>"$base.err"; then
				echo "   failed (see $base.txt and $base.err); its other figures are kept" >&2
				status=1
			fi
			if [ -s "$base.json" ]; then lists[$i]+="$base.json,"; fi
		done
	done
done

node bench/compare.js "${lists[0]}" "${lists[1]}" | tee "$out/compare.txt"
node bench/compare.js "${lists[0]}" "${lists[1]}" --md >"$out/compare.md"
echo "results in $out (the load of other programs: the *_other_processes_cpu figures and the 'other processes' CPU lines of the .txt reports)" >&2
exit $status
