#!/usr/bin/env bash
# Side-by-side benchmark: presenced against the Node peer (bench/server.js), same scenarios,
# same machine, same Redis setup, one after the other.
#
#   bench/run.sh            # the default run, about 15 minutes
#   bench/run.sh -quick     # smoke run, about 2-4 minutes
#   bench/run.sh -quick -scenario idle,typing    # extra flags go to presence-load (both runs)
#
# Results: bin/bench/<UTC time>/{presenced,node}.{json,txt} and compare.{txt,md}
# (BENCH_OUT overrides the directory). Not part of `make test`.
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
for a in "$@"; do [ "$a" = "-quick" ] || [ "$a" = "--quick" ] && quick=1; done
if [ "$quick" = 1 ]; then
	flags=(-scenario side -redis own -inflight 500 -connect-rate 100000)
else
	# (a) idle memory at 10,000 sockets and 5,000 sockets x 3 conversations, (b) heartbeat
	# rate at p99 <= 50 ms, (c) typing 20 rooms x 100 members at 500/s on 1 and 2 nodes,
	# (d) join burst: 500 in flight, join right after connect, (e) connect rate,
	# (f) presence:query of 1,000 ids, (g) status updates to 1,000 subscribers
	flags=(-scenario side -redis own -inflight 500 -connect-rate 100000
		-idle-n 10000 -n 5000 -convs 3 -rates 2k,5k,10k,20k -step-duration 10s -baseline 5s
		-typing-rooms 20 -typing-members 100 -typing-rate 500 -typing-duration 20s
		-subscribers 1000 -flaps 10 -queries 100 -query-sizes 1000)
fi

status=0
for server in presenced node; do
	echo "== presence-load against $server ==" >&2
	if ! ./bin/presence-load -server "$server" "${flags[@]}" "$@" -json -out "$out/$server.txt" >"$out/$server.json"; then
		echo "presence-load against $server reported a failure (see $out/$server.txt); its other figures are kept" >&2
		status=1
	fi
done

node bench/compare.js "$out/presenced.json" "$out/node.json" | tee "$out/compare.txt"
node bench/compare.js "$out/presenced.json" "$out/node.json" --md >"$out/compare.md"
echo "results in $out (machine load during each run: the 'other processes' CPU lines of the .txt reports)" >&2
exit $status
