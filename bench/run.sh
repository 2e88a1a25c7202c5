#!/usr/bin/env bash
# Side-by-side benchmark: presenced against the Node peer (bench/server.js), same scenarios,
# same machine, same Redis setup. The servers take turns scenario by scenario (presenced idle,
# Node idle, presenced heartbeat, Node heartbeat, …) so that both meet about the same load from
# other programs on a shared machine.
#
#   bench/run.sh            # the default run, about 10-15 minutes
#   bench/run.sh -quick     # smoke run, about 3-4 minutes
#   bench/run.sh -quick -typing-nodes 1    # extra flags go to every presence-load run
#
# Results: bin/bench/<UTC time>/ (BENCH_OUT overrides it): <server>-<scenario>.{json,txt},
# compare.txt and compare.md. Not part of `make test`.
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
if [ "$quick" = 1 ]; then
	flags=(-redis own -inflight 500 -connect-rate 100000)
else
	# (a) memory at 10,000 idle sockets and 5,000 sockets x 3 conversations, (b) heartbeat
	# rate at p99 <= 50 ms, (c) typing 20 rooms x 100 members at 500/s on 1 and 2 nodes,
	# (d) join burst: 500 in flight, join right after connect, (e) connect rate,
	# (f) presence:query of 1,000 ids, (g) status updates to 1,000 subscribers
	flags=(-redis own -inflight 500 -connect-rate 100000
		-idle-n 10000 -n 5000 -convs 3 -rates 2k,5k,10k,20k -step-duration 10s -baseline 5s
		-typing-rooms 20 -typing-members 100 -typing-rates 100,500 -typing-duration 20s
		-subscribers 1000 -flaps 10 -queries 100 -query-sizes 1000)
fi

status=0
lists=([0]="" [1]="")
for scenario in idle heartbeat typing subscribe; do
	i=0
	for server in presenced node; do
		echo "== $scenario against $server ($(date -u +%H:%M:%S)) ==" >&2
		base="$out/$server-$scenario"
		if ! ./bin/presence-load -server "$server" -scenario "$scenario" "${flags[@]}" "$@" -json -out "$base.txt" >"$base.json" 2>"$base.err"; then
			echo "   failed (see $base.txt and $base.err); its other figures are kept" >&2
			status=1
		fi
		if [ -s "$base.json" ]; then lists[$i]+="$base.json,"; fi
		i=$((i + 1))
	done
done

node bench/compare.js "${lists[0]}" "${lists[1]}" | tee "$out/compare.txt"
node bench/compare.js "${lists[0]}" "${lists[1]}" --md >"$out/compare.md"
echo "results in $out (the load of other programs: the *_other_processes_cpu figures and the 'other processes' CPU lines of the .txt reports)" >&2
exit $status
