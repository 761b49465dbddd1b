#!/usr/bin/env bash
# Load scenarios over `sless load`: each starts its own sless dev, drives it,
# and writes a report (plots, a Markdown page, a summary) under
# benchmarks/reports/<scenario>/, which is tracked. The raw run (every second's
# figures and the latency histogram, for `sless load --compare`) goes to
# bin/bench-runs/<scenario>/run.json instead: megabytes that would change in
# the tree on every run and that no page links. Run all with
# `make bench-scenarios`, or some: benchmarks/scenarios/run.sh spike cold-start.
# About 12 minutes for all.
#
#   step       stress-slow from zero to 40 requests/s (0.5 s each): instances over time
#   spike      hello-go at 20/s with 10 s at 1,000/s in the middle
#   stress     each stress function at a fixed rate: what each costs
#   cold-start the first request to a function at zero, per runtime
#   drain      10,000 RabbitMQ messages to a function at zero
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
sless=$root/bin/sless
reports=$root/benchmarks/reports
runs=$root/bin/bench-runs
samples=$root/config/samples/functions
amqp=${SLESS_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
work=$(mktemp -d)
dev_pid=
trap 'stop_dev; rm -rf "$work"' EXIT

# start_dev DIR [FLAGS...]: sless dev on DIR, on free ports, until stop_dev.
start_dev() {
	local dir=$1
	shift
	listen=127.0.0.1:$(free_port)
	admin=127.0.0.1:$(free_port)
	"$sless" dev --functions "$dir" --cache-dir "$work/cache" --listen "$listen" --admin "$admin" \
		--allow-external-sources "$@" >"$work/dev.log" 2>&1 &
	dev_pid=$!
	for _ in $(seq 600); do
		if curl -sf "http://$admin/v1/functions" | grep -q '"state"' &&
			! curl -sf "http://$admin/v1/functions" | grep -q '"state":"building"'; then
			return
		fi
		sleep 0.5
	done
	echo "sless dev did not come up:" >&2
	tail -20 "$work/dev.log" >&2
	exit 1
}

stop_dev() {
	if [ -n "$dev_pid" ]; then
		kill "$dev_pid" 2>/dev/null || true
		wait "$dev_pid" 2>/dev/null || true
		dev_pid=
	fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# load SCENARIO [sless load flags...]: one run, its report in $reports/SCENARIO
# and its raw run in $runs/SCENARIO/run.json.
load() {
	local name=$1
	shift
	rm -rf "${reports:?}/$name" "${runs:?}/$name"
	mkdir -p "$reports/$name" "$runs/$name"
	echo "== $name: sless load $*"
	"$sless" load --admin "http://$admin" --report "$reports/$name" --json "$runs/$name/run.json" "$@" |
		tee "$reports/$name/summary.txt"
}

step() {
	start_dev "$samples"
	load step "http://$listen/fn/default/stress-slow?seconds=0.5" --rate 1:40:40s,40:40:20s --connections 400
	stop_dev
}

spike() {
	start_dev "$samples"
	load spike "http://$listen/fn/default/hello-go" --rate 20:20:10s,1000:1000:10s,20:20:20s --connections 200
	stop_dev
}

stress() {
	start_dev "$samples"
	local fn query rate
	while read -r fn query rate; do
		load "stress/$fn" "http://$listen/fn/default/$fn?$query" --rate "$rate" --duration 15s --connections 100
	done <<-LIST
		stress-go-fast n=1000 200
		stress-bigloop n=10000000 20
		stress-divzero n=7&d=2 200
		stress-go-nil nil=0 200
		stress-js-badenv bad=0 200
		stress-crash crash=0 200
		stress-slow seconds=0.1 50
		stress-writer rows=100 50
		stress-js-async x=1 100
		stress-go-pgstorm workers=2&seconds=1 2
	LIST
	stop_dev
}

cold_start() {
	local dir=$work/cold
	mkdir -p "$dir"
	for rt in go python node; do
		local handler=Handle
		[ "$rt" = python ] && handler=main.handle
		[ "$rt" = node ] && handler=index.handle
		cat >>"$dir/cold.yaml" <<-YAML
			apiVersion: sless.dev/v1alpha1
			kind: Function
			metadata: {name: cold-$rt}
			spec: {runtime: $rt, source: $samples/hello-$rt, handler: $handler, scale: {initial: 0}}
			---
		YAML
	done
	start_dev "$dir"
	for rt in go python node; do
		load "cold-start/$rt" "http://$listen/fn/default/cold-$rt" --requests 1 --connections 1
	done
	stop_dev
}

drain() {
	local dir=$work/drain queue
	queue=sless-bench-drain-$$
	mkdir -p "$dir/py"
	printf 'def handle(e):\n    return "ok"\n' >"$dir/py/main.py"
	cat >"$dir/worker.yaml" <<-YAML
		apiVersion: sless.dev/v1alpha1
		kind: Function
		metadata: {name: worker}
		spec:
		  runtime: python
		  source: ./py
		  scale: {initial: 0, max: 5}
		  triggers:
		    - {name: jobs, rabbitmq: {queue: $queue, prefetch: 20}}
	YAML
	start_dev "$dir" --amqp-url "$amqp"
	# The function sits at zero; the first messages wake it.
	load drain --queue "$queue" --declare-queue --messages 10000 --function default/worker --amqp-url "$amqp" --duration 5m
	stop_dev
	rabbitmqctl delete_queue "$queue" >/dev/null 2>&1 || true
}

[ -x "$sless" ] || { echo "build bin/sless first (make build)" >&2; exit 2; }
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(step spike stress cold-start drain)
for s in "${scenarios[@]}"; do
	case $s in
	step | spike | stress | drain) "$s" ;;
	cold-start) cold_start ;;
	*) echo "unknown scenario $s: step, spike, stress, cold-start, drain" >&2; exit 2 ;;
	esac
done
