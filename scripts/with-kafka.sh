#!/usr/bin/env bash
# with-kafka.sh CMD [ARGS...]: runs CMD with SURGE_KAFKA_BROKERS pointing at
# a fresh single-node Kafka broker (scripts/kafka.sh), and stops the broker
# afterwards, whether CMD passed, failed or was interrupted. Exits with
# CMD's status. With SURGE_KAFKA_BROKERS already set, runs CMD against that
# broker and starts nothing.
set -euo pipefail

[[ $# -gt 0 ]] || {
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
}
if [[ -n ${SURGE_KAFKA_BROKERS:-} ]]; then
	exec "$@"
fi

kafka=$(dirname "$0")/kafka.sh
dir=$(mktemp -d "${TMPDIR:-/tmp}/surge-kafka.XXXXXX")
trap '"$kafka" stop "$dir"' EXIT
# The watchdog covers this shell being killed outright (no trap runs then).
out=$(SURGE_KAFKA_WATCH_PID=$$ "$kafka" start "$dir")
SURGE_KAFKA_BROKERS=$(sed -n 's/^SURGE_KAFKA_BROKERS=//p' <<<"$out")
export SURGE_KAFKA_BROKERS

status=0
"$@" || status=$?
exit "$status"
