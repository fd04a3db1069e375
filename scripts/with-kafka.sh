#!/usr/bin/env bash
# with-kafka.sh CMD [ARGS...]: runs CMD with SURGE_KAFKA_BROKERS pointing at
# a fresh single-node Kafka broker (scripts/kafka.sh), and the variables
# naming its SASL_SSL listener (SURGE_KAFKA_SASL_SSL_BROKERS,
# SURGE_KAFKA_TEST_CA, SURGE_KAFKA_TEST_USER, SURGE_KAFKA_TEST_PASSWORD)
# set, and stops the broker
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
for v in SURGE_KAFKA_BROKERS SURGE_KAFKA_SASL_SSL_BROKERS SURGE_KAFKA_TEST_CA SURGE_KAFKA_TEST_USER SURGE_KAFKA_TEST_PASSWORD; do
	export "$v=$(sed -n "s/^$v=//p" <<<"$out")"
done

status=0
"$@" || status=$?
exit "$status"
