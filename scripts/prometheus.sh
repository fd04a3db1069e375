#!/usr/bin/env bash
# A real Prometheus for Surge's tests and for trying the rules in
# deploy/prometheus: Debian's `prometheus` package, installed with apt-get
# when prometheus or promtool is missing.
#
#   scripts/prometheus.sh install                   apt-get install prometheus (as root, or via sudo)
#   scripts/prometheus.sh start CONFIG DIR [PORT]   start one on 127.0.0.1:PORT (default: a free
#                                                   port) with CONFIG, its data in DIR; prints
#                                                   SURGE_PROMETHEUS_URL=http://127.0.0.1:PORT and
#                                                   SURGE_PROMETHEUS_PID=PID once it is ready
#   scripts/prometheus.sh stop DIR                  SIGTERM, SIGKILL after 10 s
#
# Environment:
#   SURGE_PROMETHEUS_WATCH_PID   start: stop Prometheus when this process exits,
#                                so a test binary killed by a timeout leaks none
set -euo pipefail

START_TIMEOUT_S=60
STOP_GRACE_S=10

die() {
	echo "prometheus.sh: $*" >&2
	exit 1
}

# install puts prometheus and promtool on PATH unless they are there.
install() {
	if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
		return
	fi
	command -v apt-get >/dev/null 2>&1 || die "prometheus/promtool not found and no apt-get: install Prometheus 2.x (Debian: apt-get install prometheus)"
	local sudo=()
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null 2>&1 || die "prometheus/promtool not found; run as root or install them: apt-get install prometheus"
		sudo=(sudo -n)
	fi
	# The package's service is not started: policy-rc.d or the lack of
	# systemd stops it in containers, and the tests start their own.
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get install -y --no-install-recommends prometheus >&2 ||
		{ "${sudo[@]}" apt-get update >&2 && "${sudo[@]}" apt-get install -y --no-install-recommends prometheus >&2; } ||
		die "apt-get install prometheus failed (see above)"
	command -v promtool >/dev/null 2>&1 || die "apt-get installed prometheus but promtool is not on PATH"
}

# free_port needs python3; pass PORT to start without it.
free_port() {
	command -v python3 >/dev/null 2>&1 || die "no python3 to find a free port: pass PORT to start"
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start() {
	local config=${1:?usage: start CONFIG DIR [PORT]} dir=${2:?usage: start CONFIG DIR [PORT]} port=${3:-}
	install
	[ -f "$config" ] || die "config $config not found"
	mkdir -p "$dir/data"
	[ -n "$port" ] || port=$(free_port)
	local url=http://127.0.0.1:$port
	prometheus --config.file="$config" --storage.tsdb.path="$dir/data" \
		--web.listen-address=127.0.0.1:"$port" --web.enable-lifecycle \
		>"$dir/prometheus.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$dir/prometheus.pid"
	if [ -n "${SURGE_PROMETHEUS_WATCH_PID:-}" ]; then
		(
			while kill -0 "$SURGE_PROMETHEUS_WATCH_PID" 2>/dev/null; do sleep 1; done
			kill "$pid" 2>/dev/null || true
		) >/dev/null 2>&1 </dev/null &
	fi
	local deadline=$(($(date +%s) + START_TIMEOUT_S))
	until curl -fsS "$url/-/ready" >/dev/null 2>&1; do
		kill -0 "$pid" 2>/dev/null || { tail -20 "$dir/prometheus.log" >&2; die "prometheus exited at start"; }
		[ "$(date +%s)" -lt "$deadline" ] || { tail -20 "$dir/prometheus.log" >&2; die "prometheus not ready after ${START_TIMEOUT_S}s"; }
		sleep 0.2
	done
	echo "SURGE_PROMETHEUS_URL=$url"
	echo "SURGE_PROMETHEUS_PID=$pid"
}

stop() {
	local dir=${1:?usage: stop DIR}
	[ -f "$dir/prometheus.pid" ] || return 0
	local pid
	pid=$(cat "$dir/prometheus.pid")
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq $((STOP_GRACE_S * 5))); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	kill -9 "$pid" 2>/dev/null || true
}

case "${1:-}" in
install) install ;;
start) shift; start "$@" ;;
stop) shift; stop "$@" ;;
*) die "usage: $0 install | start CONFIG DIR [PORT] | stop DIR" ;;
esac
