#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft, combined broker+controller) for
# Surge's tests, built from Maven Central jars: no Docker, no tarball
# download, nothing but java and mvn.
#
#   scripts/kafka.sh fetch          jars into $SURGE_KAFKA_CACHE/<version>/libs (once)
#   scripts/kafka.sh start [DIR]    format + start a broker in DIR (default: a fresh
#                                   temp dir); prints SURGE_KAFKA_BROKERS=127.0.0.1:PORT
#                                   (PLAINTEXT) and the SASL_SSL listener's settings:
#                                   SURGE_KAFKA_SASL_SSL_BROKERS=127.0.0.1:PORT2,
#                                   SURGE_KAFKA_TEST_CA (the CA that signed the broker's
#                                   certificate), SURGE_KAFKA_TEST_USER and
#                                   SURGE_KAFKA_TEST_PASSWORD (a user known to SCRAM-SHA-256,
#                                   SCRAM-SHA-512 and PLAIN)
#   scripts/kafka.sh stop DIR       SIGTERM, SIGKILL after 10 s, then remove DIR
#
# Environment:
#   SURGE_KAFKA_VERSION     Kafka version (default below; 4.x, KRaft only)
#   SURGE_KAFKA_CACHE       cache root (default ~/.cache/surge-kafka)
#   SURGE_KAFKA_JAVA_OPTS   JVM flags (default: small heap, see below)
#   SURGE_KAFKA_WATCH_PID   start: stop the broker when this process exits, so a
#                           test binary killed by a timeout leaks no broker
set -euo pipefail

KAFKA_VERSION=${SURGE_KAFKA_VERSION:-4.1.2}
# Kafka 4.x logs through SLF4J 1.7 to Log4j 2 (as its own distribution does);
# the binding is not a dependency of the kafka_2.13 artifact, so it is named here.
LOG4J_VERSION=2.24.3
CACHE_ROOT=${SURGE_KAFKA_CACHE:-$HOME/.cache/surge-kafka}
CACHE=$CACHE_ROOT/$KAFKA_VERSION
LIBS=$CACHE/libs
MAIN_CLASS=kafka.Kafka
STORAGE_TOOL=kafka.tools.StorageTool
START_TIMEOUT_S=60
STOP_GRACE_S=10
# The SASL_SSL listener's one user; its password is random per broker.
SASL_USER=surge
# Days the test CA and broker certificate are valid: a broker lives for one
# test run.
CERT_DAYS=30

die() {
	echo "kafka.sh: $*" >&2
	exit 1
}

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH: $2"
}

now_ms() { date +%s%3N; }

# The broker's classpath comes from this pom: kafka_2.13 pulls in the server,
# storage, metadata, raft and coordinator modules at runtime scope.
write_pom() {
	cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>run.surge</groupId>
  <artifactId>surge-kafka-broker</artifactId>
  <version>$KAFKA_VERSION</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
}

cmd_fetch() {
	# The marker is written last, so an interrupted fetch is redone.
	[[ -f $CACHE/.complete ]] && return 0
	need mvn "install Maven 3.8+ (Debian: apt-get install maven); it fetches Kafka's jars from Maven Central"
	need java "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)"
	mkdir -p "$CACHE"
	# Test binaries started in parallel may all fetch at once: one does the
	# work, the others wait for it and find the marker.
	exec 9>"$CACHE/.lock"
	flock 9
	if [[ -f $CACHE/.complete ]]; then
		exec 9>&-
		return 0
	fi
	local t0 tmp
	t0=$(now_ms)
	echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION jars from Maven Central into $LIBS" >&2
	write_pom "$CACHE/pom.xml"
	tmp=$CACHE/libs.tmp
	rm -rf "$tmp" "$LIBS"
	if ! mvn -q -B -f "$CACHE/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" >"$CACHE/fetch.log" 2>&1; then
		tail -n 40 "$CACHE/fetch.log" >&2
		die "mvn could not fetch Kafka $KAFKA_VERSION (full log: $CACHE/fetch.log)"
	fi
	mv "$tmp" "$LIBS"
	touch "$CACHE/.complete"
	exec 9>&-
	echo "kafka.sh: fetched $(ls "$LIBS" | wc -l) jars in $(( ($(now_ms) - t0) )) ms" >&2
}

port_in_use() {
	# bash's /dev/tcp connect succeeds only if something listens there.
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port [TAKEN...]: a free loopback port other than the ones given.
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 40000))
		[[ " $* " == *" $p "* ]] && continue
		port_in_use "$p" || {
			echo "$p"
			return 0
		}
	done
	die "no free loopback port found"
}

# A Kafka cluster id is a 16-byte UUID in unpadded base64url: 22 characters.
# Generating it here spares a JVM start (`kafka-storage random-uuid`). One
# in 64 starts with '-', so it is passed as --cluster-id=ID: given as a
# separate argument, the tool's parser takes it for an option and fails.
cluster_id() {
	head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'
}

# write_tls DIR: a CA and a broker certificate for 127.0.0.1 and localhost
# signed by it, in DIR/tls (ca.pem for clients; broker.pem, key then
# certificate, for the broker's PEM keystore), and a random SASL password
# in DIR/sasl-password.
write_tls() {
	local dir=$1 t=$1/tls
	need openssl "install OpenSSL (Debian: apt-get install openssl); it makes the SASL_SSL listener's certificates"
	mkdir -p "$t"
	openssl req -x509 -newkey rsa:2048 -nodes -days "$CERT_DAYS" -subj "/CN=surge-kafka-test-ca" \
		-keyout "$t/ca.key" -out "$t/ca.pem" >"$t/openssl.out" 2>&1 ||
		die "openssl could not make the test CA: $(cat "$t/openssl.out")"
	openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
		-keyout "$t/broker.key" -out "$t/broker.csr" >>"$t/openssl.out" 2>&1 ||
		die "openssl could not make the broker's key: $(cat "$t/openssl.out")"
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t/san.ext"
	openssl x509 -req -in "$t/broker.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
		-days "$CERT_DAYS" -extfile "$t/san.ext" -out "$t/broker.crt" >>"$t/openssl.out" 2>&1 ||
		die "openssl could not sign the broker's certificate: $(cat "$t/openssl.out")"
	# Kafka's PEM keystore wants the key in PKCS#8, before the certificate.
	openssl pkcs8 -topk8 -nocrypt -in "$t/broker.key" -out "$t/broker.pk8" 2>>"$t/openssl.out" ||
		die "openssl could not convert the broker's key: $(cat "$t/openssl.out")"
	cat "$t/broker.pk8" "$t/broker.crt" >"$t/broker.pem"
	chmod 600 "$t"/*.key "$t/broker.pk8" "$t/broker.pem"
	head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$dir/sasl-password"
	chmod 600 "$dir/sasl-password"
}

write_config() {
	local dir=$1 port=$2 cport=$3 sport=$4 pw
	pw=$(cat "$dir/sasl-password")
	cat >"$dir/server.properties" <<EOF
# Single-node KRaft broker for Surge's tests; written by scripts/kafka.sh.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
log.dirs=$dir/data

# The SASL_SSL listener (cluster mode's --kafka-tls/--kafka-sasl tests):
# TLS with a certificate from write_tls, then SCRAM (users created at format
# time) or PLAIN (users listed here).
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$dir/tls/broker.pem
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$pw";

# One broker: every internal topic has one replica and needs one in sync.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
# Fewer internal partitions than the default 50: they are created on first
# use, and each costs a log on this small machine.
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4

# Surge creates its topics itself; a typo must fail, not create a topic.
auto.create.topics.enable=false
num.partitions=1

# Failover tests use 2-3 s session timeouts and want rebalances at once.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500

# Small machine: few threads, a small log cleaner buffer (compacted
# snapshot topics still get cleaned).
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
EOF
	cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = info
logger.apache.name = org.apache.kafka
logger.apache.level = info
EOF
}

java_opts() {
	# Kafka's own default is a 1 GiB heap and G1; tests need far less, and
	# the machine is shared.
	echo "${SURGE_KAFKA_JAVA_OPTS:--Xms128m -Xmx512m -XX:+UseSerialGC -Djava.awt.headless=true}"
}

log_tail() {
	local dir=$1
	echo "---- $dir/server.log (tail) ----" >&2
	tail -n 40 "$dir/server.log" 2>/dev/null >&2 || true
	echo "---- $dir/kafka.out (tail) ----" >&2
	tail -n 20 "$dir/kafka.out" 2>/dev/null >&2 || true
}

# start_once DIR: formats and starts a broker in DIR; returns 2 if it lost a
# race for its ports (so the caller retries with others), dies on any other
# failure.
start_once() {
	local dir=$1 port cport sport pid t0 deadline pw
	port=$(free_port)
	cport=$(free_port "$port")
	sport=$(free_port "$port" "$cport")
	rm -rf "$dir/data" "$dir/tls"
	write_tls "$dir"
	write_config "$dir" "$port" "$cport" "$sport"
	pw=$(cat "$dir/sasl-password")
	local -a jopts
	read -r -a jopts <<<"$(java_opts)"
	jopts+=("-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$LIBS/*")
	if ! java "${jopts[@]}" "$STORAGE_TOOL" format --ignore-formatted \
		--cluster-id="$(cluster_id)" -c "$dir/server.properties" \
		--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$pw]" \
		--add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$pw]" \
		>"$dir/format.out" 2>&1; then
		cat "$dir/format.out" >&2
		die "formatting the KRaft log dir in $dir failed"
	fi
	t0=$(now_ms)
	# setsid: the broker outlives this script and ignores the terminal's ^C;
	# `stop` (or the watchdog) ends it.
	setsid java "${jopts[@]}" "$MAIN_CLASS" "$dir/server.properties" \
		</dev/null >"$dir/kafka.out" 2>&1 &
	pid=$!
	echo "$pid" >"$dir/kafka.pid"
	deadline=$((SECONDS + START_TIMEOUT_S))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			if grep -q "Address already in use" "$dir/server.log" "$dir/kafka.out" 2>/dev/null; then
				return 2
			fi
			log_tail "$dir"
			die "the broker exited during start-up (dir $dir)"
		fi
		# KafkaRaftServer logs this once the broker is unfenced and serving.
		if grep -q "Kafka Server started" "$dir/server.log" 2>/dev/null && port_in_use "$port" && port_in_use "$sport"; then
			echo "127.0.0.1:$port" >"$dir/brokers"
			echo "127.0.0.1:$sport" >"$dir/sasl-ssl-brokers"
			echo "kafka.sh: Kafka $KAFKA_VERSION ready on 127.0.0.1:$port in $(( $(now_ms) - t0 )) ms (pid $pid, log $dir/server.log)" >&2
			return 0
		fi
		sleep 0.1
	done
	log_tail "$dir"
	kill -KILL "$pid" 2>/dev/null || true
	die "the broker did not come up within ${START_TIMEOUT_S} s (dir $dir)"
}

# The watchdog ends the broker when the watched process (a test binary) is
# gone, however it died.
start_watchdog() {
	local dir=$1 watch=$2
	setsid bash -c '
		while kill -0 "$1" 2>/dev/null && [[ -f "$2/kafka.pid" ]]; do sleep 1; done
		[[ -f "$2/kafka.pid" ]] && exec "$3" stop "$2"
	' watchdog "$watch" "$dir" "$(realpath "$0")" </dev/null >/dev/null 2>&1 &
}

cmd_start() {
	need java "install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless)"
	cmd_fetch
	local dir=${1:-}
	if [[ -z $dir ]]; then
		dir=$(mktemp -d "${TMPDIR:-/tmp}/surge-kafka.XXXXXX")
	fi
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	[[ -f $dir/kafka.pid ]] && kill -0 "$(cat "$dir/kafka.pid")" 2>/dev/null &&
		die "a broker already runs in $dir (pid $(cat "$dir/kafka.pid"))"
	local attempt rc
	for attempt in 1 2 3; do
		rc=0
		start_once "$dir" || rc=$?
		[[ $rc == 0 ]] && break
		echo "kafka.sh: port taken during start-up, retrying ($attempt)" >&2
	done
	[[ $rc == 0 ]] || die "could not bind free ports after 3 attempts"
	if [[ -n ${SURGE_KAFKA_WATCH_PID:-} ]]; then
		start_watchdog "$dir" "$SURGE_KAFKA_WATCH_PID"
	fi
	echo "SURGE_KAFKA_BROKERS=$(cat "$dir/brokers")"
	echo "SURGE_KAFKA_SASL_SSL_BROKERS=$(cat "$dir/sasl-ssl-brokers")"
	echo "SURGE_KAFKA_TEST_CA=$dir/tls/ca.pem"
	echo "SURGE_KAFKA_TEST_USER=$SASL_USER"
	echo "SURGE_KAFKA_TEST_PASSWORD=$(cat "$dir/sasl-password")"
	echo "SURGE_KAFKA_DIR=$dir"
}

cmd_stop() {
	local dir=${1:-}
	[[ -n $dir ]] || die "usage: kafka.sh stop DIR"
	[[ -d $dir ]] || return 0
	# Refuse to delete a directory this script did not set up (an empty one
	# is what a start that failed early leaves behind).
	if [[ ! -f $dir/server.properties ]] && rmdir "$dir" 2>/dev/null; then
		return 0
	fi
	[[ -f $dir/server.properties ]] || die "$dir does not look like a broker dir made by kafka.sh start"
	if [[ -f $dir/kafka.pid ]]; then
		local pid i
		pid=$(cat "$dir/kafka.pid")
		rm -f "$dir/kafka.pid"
		if kill -TERM "$pid" 2>/dev/null; then
			for ((i = 0; i < STOP_GRACE_S * 10; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			if kill -0 "$pid" 2>/dev/null; then
				echo "kafka.sh: broker $pid ignored SIGTERM for ${STOP_GRACE_S} s, sending SIGKILL" >&2
				kill -KILL "$pid" 2>/dev/null || true
			fi
		fi
	fi
	rm -rf "$dir"
}

case ${1:-} in
fetch) cmd_fetch ;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
*)
	echo "usage: $0 fetch | start [DIR] | stop DIR" >&2
	exit 2
	;;
esac
