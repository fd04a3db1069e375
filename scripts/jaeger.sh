#!/usr/bin/env bash
# A real Jaeger (v2, all-in-one, in-memory storage) for Surge's tracing
# tests and for looking at Surge's traces: built from the Go module proxy at
# the version pinned in tools/jaeger/go.mod (go.sum makes the build
# reproducible; the main go.mod gets none of Jaeger's dependencies).
#
#   scripts/jaeger.sh install                      build the binary into the cache (once);
#                                                  prints SURGE_JAEGER_BIN=PATH
#   scripts/jaeger.sh start DIR [GRPC HTTP QUERY]  start one with its config and log in DIR,
#                                                  OTLP/gRPC on 127.0.0.1:GRPC, OTLP/HTTP on
#                                                  127.0.0.1:HTTP, the UI and query API on
#                                                  127.0.0.1:QUERY (default: free ports); prints,
#                                                  once it is ready,
#                                                    SURGE_JAEGER_OTLP_GRPC=http://127.0.0.1:GRPC
#                                                    SURGE_JAEGER_OTLP_HTTP=http://127.0.0.1:HTTP
#                                                    SURGE_JAEGER_QUERY_URL=http://127.0.0.1:QUERY
#                                                    SURGE_JAEGER_PID=PID
#   scripts/jaeger.sh stop DIR                     SIGTERM, SIGKILL after 10 s
#
# Environment:
#   SURGE_JAEGER_CACHE       where the binary is built (default
#                            ${XDG_CACHE_HOME:-$HOME/.cache}/surge); one directory per version
#   SURGE_JAEGER_MAX_TRACES  traces kept in memory (default below); the oldest go first
#   SURGE_JAEGER_WATCH_PID   start: stop Jaeger when this process exits, so a
#                            test binary killed by a timeout leaks none
set -euo pipefail

TOOLS=$(cd "$(dirname "$0")/../tools/jaeger" && pwd)
MODULE=github.com/jaegertracing/jaeger
VERSION=$(sed -n "s|^[[:space:]]*$MODULE \(v[^ ]*\).*|\1|p" "$TOOLS/go.mod")
CACHE=${SURGE_JAEGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/surge}/jaeger-$VERSION
BIN=$CACHE/jaeger
MAX_TRACES=${SURGE_JAEGER_MAX_TRACES:-100000}
START_TIMEOUT_S=60
STOP_GRACE_S=10
# The collector logs this once every receiver, pipeline and extension runs.
READY_LINE='Everything is ready'

die() {
	echo "jaeger.sh: $*" >&2
	exit 1
}

# install builds cmd/jaeger with the tools module's pinned dependencies;
# the binary lands under its final name only when complete, so tests
# installing at once never run half a file.
install() {
	[ -n "$VERSION" ] || die "no $MODULE version in $TOOLS/go.mod"
	if [ -x "$BIN" ]; then
		echo "SURGE_JAEGER_BIN=$BIN"
		return
	fi
	command -v go >/dev/null 2>&1 || die "go not found on PATH: Jaeger is built from source with the Go toolchain"
	mkdir -p "$CACHE"
	local tmp=$BIN.tmp.$$ t0
	t0=$(date +%s)
	echo "jaeger.sh: building Jaeger $VERSION into $CACHE (first time only; a few minutes)" >&2
	(cd "$TOOLS" && GOWORK=off go build -mod=readonly -buildvcs=false -trimpath -o "$tmp" "$MODULE/cmd/jaeger") ||
		{ rm -f "$tmp"; die "go build $MODULE/cmd/jaeger@$VERSION failed (see above)"; }
	mv -f "$tmp" "$BIN"
	echo "jaeger.sh: built in $(($(date +%s) - t0)) s" >&2
	echo "SURGE_JAEGER_BIN=$BIN"
}

# free_port needs python3; pass the ports to start without it.
free_port() {
	command -v python3 >/dev/null 2>&1 || die "no python3 to find a free port: pass GRPC HTTP QUERY to start"
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# write_config: memory storage, the OTLP receivers and the query service,
# all on 127.0.0.1; no internal metrics endpoint (it would want port 8888).
write_config() {
	local file=$1 grpc=$2 http=$3 query=$4 query_grpc=$5
	cat >"$file" <<EOF
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: $MAX_TRACES
  jaeger_query:
    storage:
      traces: memstore
    # Jaeger traces its own queries by default, to an OTLP receiver on
    # localhost:4317: possibly another Jaeger, or Surge's.
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:$query
    grpc:
      endpoint: 127.0.0.1:$query_grpc
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$grpc
      http:
        endpoint: 127.0.0.1:$http
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

start() {
	local dir=${1:?usage: start DIR [GRPC HTTP QUERY]} grpc=${2:-} http=${3:-} query=${4:-}
	install >/dev/null
	mkdir -p "$dir"
	[ -n "$grpc" ] || grpc=$(free_port)
	[ -n "$http" ] || http=$(free_port)
	[ -n "$query" ] || query=$(free_port)
	write_config "$dir/jaeger.yaml" "$grpc" "$http" "$query" "$(free_port)"
	"$BIN" --config "$dir/jaeger.yaml" >"$dir/jaeger.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$dir/jaeger.pid"
	if [ -n "${SURGE_JAEGER_WATCH_PID:-}" ]; then
		(
			while kill -0 "$SURGE_JAEGER_WATCH_PID" 2>/dev/null; do sleep 1; done
			kill "$pid" 2>/dev/null || true
		) >/dev/null 2>&1 </dev/null &
	fi
	local url=http://127.0.0.1:$query deadline=$(($(date +%s) + START_TIMEOUT_S))
	until grep -q "$READY_LINE" "$dir/jaeger.log" && curl -fsS "$url/api/services" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { tail -20 "$dir/jaeger.log" >&2; die "jaeger exited at start"; }
		[ "$(date +%s)" -lt "$deadline" ] || { tail -20 "$dir/jaeger.log" >&2; die "jaeger not ready after ${START_TIMEOUT_S}s"; }
		sleep 0.2
	done
	echo "SURGE_JAEGER_OTLP_GRPC=http://127.0.0.1:$grpc"
	echo "SURGE_JAEGER_OTLP_HTTP=http://127.0.0.1:$http"
	echo "SURGE_JAEGER_QUERY_URL=$url"
	echo "SURGE_JAEGER_PID=$pid"
}

# alive: pid runs. An exited Jaeger, orphaned when start's shell ended,
# stays a zombie until init reaps it, and kill -0 still finds that.
alive() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || { kill -0 "$1" 2>/dev/null; return; }
	[ "$(cut -d' ' -f1 <<<"${stat##*) }")" != Z ]
}

stop() {
	local dir=${1:?usage: stop DIR}
	[ -f "$dir/jaeger.pid" ] || return 0
	local pid
	pid=$(cat "$dir/jaeger.pid")
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq $((STOP_GRACE_S * 5))); do
		alive "$pid" || return 0
		sleep 0.2
	done
	kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
install) install ;;
start) shift; start "$@" ;;
stop) shift; stop "$@" ;;
*) die "usage: $0 install | start DIR [GRPC HTTP QUERY] | stop DIR" ;;
esac
