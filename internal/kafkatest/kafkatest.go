// Package kafkatest gives tests a real Apache Kafka broker.
//
// Cluster mode's guarantees (fencing by transactional producer epochs,
// consumer-group failover) are Kafka's, so its tests run against the real
// thing: a single-node KRaft broker that scripts/kafka.sh builds from Maven
// Central jars and runs on the machine's Java. `make test` starts one broker
// for the whole run and exports SURGE_KAFKA_BROKERS; a test binary run on
// its own (go test ./internal/...) starts its own, once, through Brokers.
//
// A package whose tests use Brokers calls Main from TestMain so the broker
// it may have started is stopped when its tests end:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// EnvBrokers names the variable holding a broker list (host:port[,...]) to
// test against instead of starting a broker.
const EnvBrokers = "SURGE_KAFKA_BROKERS"

// startTimeout covers a cold fetch of the jars (seconds on a good link)
// plus the broker's start-up (seconds), with room for a slow mirror.
const startTimeout = 5 * time.Minute

// Variables naming the SASL_SSL listener of the broker `make test`
// started (scripts/kafka.sh prints them; scripts/with-kafka.sh exports
// them).
const (
	EnvSASLSSLBrokers = "SURGE_KAFKA_SASL_SSL_BROKERS"
	EnvCA             = "SURGE_KAFKA_TEST_CA"
	EnvUser           = "SURGE_KAFKA_TEST_USER"
	EnvPassword       = "SURGE_KAFKA_TEST_PASSWORD"
)

// Secure is the broker's SASL_SSL listener: TLS with a certificate signed
// by the CA in CAFile, then SASL (SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN)
// as User with Password.
type Secure struct {
	Brokers, CAFile, User, Password string
}

// The broker this test binary started, if any; one per binary, shared by
// all its tests.
var (
	mu       sync.Mutex
	tried    bool
	brokers  string
	secure   Secure
	dir      string
	startErr error
)

// Brokers returns the bootstrap address of a Kafka broker for t to use:
// $SURGE_KAFKA_BROKERS if set, otherwise a broker this test binary starts
// on first use (and Main stops). It fails t, saying what to install, when
// java or mvn are missing: these tests prove cluster mode and must not be
// skipped silently.
func Brokers(t testing.TB) string {
	t.Helper()
	if b := os.Getenv(EnvBrokers); b != "" {
		return b
	}
	mu.Lock()
	defer mu.Unlock()
	startOnce(t)
	return brokers
}

// SecureBrokers is Brokers' SASL_SSL listener: the one of the broker in
// $SURGE_KAFKA_SASL_SSL_BROKERS if set, otherwise of the broker this test
// binary starts.
func SecureBrokers(t testing.TB) Secure {
	t.Helper()
	if b := os.Getenv(EnvSASLSSLBrokers); b != "" {
		return Secure{Brokers: b, CAFile: os.Getenv(EnvCA), User: os.Getenv(EnvUser), Password: os.Getenv(EnvPassword)}
	}
	mu.Lock()
	defer mu.Unlock()
	startOnce(t)
	return secure
}

// startOnce starts this binary's broker on first use; mu must be held.
func startOnce(t testing.TB) {
	t.Helper()
	if !tried {
		tried = true
		var log string
		brokers, secure, dir, log, startErr = start()
		if startErr == nil {
			t.Logf("kafkatest: %s", strings.TrimSpace(log))
		}
	}
	if startErr != nil {
		t.Fatalf("kafkatest: no Kafka broker: %v", startErr)
	}
}

// Main runs m's tests, stops the broker Brokers started (if it did) and
// exits with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: stopping the broker: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// Stop stops the broker Brokers started, if it did, for a TestMain that
// hands the run to another kit's Main (jaegertest.Main(m, kafkatest.Stop)).
func Stop() error { return stop() }

// requireTools says what to install when java or mvn are not on PATH.
func requireTools() error {
	var missing []string
	if _, err := exec.LookPath("java"); err != nil {
		missing = append(missing, "java (a Java 17+ runtime; Debian: apt-get install openjdk-17-jre-headless)")
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		missing = append(missing, "mvn (Maven 3.8+, fetches Kafka's jars from Maven Central; Debian: apt-get install maven)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("install %s, or set %s to an existing broker's host:port",
			strings.Join(missing, " and "), EnvBrokers)
	}
	return nil
}

// repoRoot walks up from the working directory (a test binary runs in its
// package's directory) to the directory holding go.mod.
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no go.mod above the working directory; cannot find scripts/kafka.sh")
		}
		d = parent
	}
}

func script() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "scripts", "kafka.sh"), nil
}

// start runs `scripts/kafka.sh start` and returns the broker's address,
// its SASL_SSL listener, its directory and the script's progress messages.
func start() (addr string, sec Secure, brokerDir, log string, err error) {
	if err := requireTools(); err != nil {
		return "", sec, "", "", err
	}
	sh, err := script()
	if err != nil {
		return "", sec, "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", sh, "start")
	// If this binary dies without running Main (a test timeout panics), the
	// script's watchdog stops the broker.
	cmd.Env = append(os.Environ(), fmt.Sprintf("SURGE_KAFKA_WATCH_PID=%d", os.Getpid()))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", sec, "", "", fmt.Errorf("%s start: %v\n%s", sh, err, stderr.String())
	}
	vars := map[string]*string{
		EnvBrokers: &addr, "SURGE_KAFKA_DIR": &brokerDir, EnvSASLSSLBrokers: &sec.Brokers,
		EnvCA: &sec.CAFile, EnvUser: &sec.User, EnvPassword: &sec.Password,
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && vars[k] != nil {
			*vars[k] = v
		}
	}
	if addr == "" || brokerDir == "" || sec.Brokers == "" {
		return "", sec, "", "", fmt.Errorf("%s start printed no broker address:\n%s%s", sh, stdout.String(), stderr.String())
	}
	return addr, sec, brokerDir, stderr.String(), nil
}

func stop() error {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		return nil
	}
	sh, err := script()
	if err != nil {
		return err
	}
	out, err := exec.Command("bash", sh, "stop", dir).CombinedOutput()
	dir = ""
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}

var topicSeq atomic.Uint64

// topicNameMax is Kafka's limit on a topic name's length.
const topicNameMax = 249

// Topic returns a name no other test, in this binary or another sharing the
// broker, will use: prefix, the test's name, a random part and a counter.
// It keeps only letters, digits and '-' (others become '-'): Kafka refuses
// a topic whose name differs from an existing one only in '.' versus '_'.
// Use it for topics and for names that Surge derives topics from, such as a
// cluster name.
func Topic(t testing.TB, prefix string) string {
	t.Helper()
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("kafkatest: random topic suffix: %v", err)
	}
	suffix := fmt.Sprintf("-%s-%d", hex.EncodeToString(r[:]), topicSeq.Add(1))
	name := sanitize(prefix + "-" + t.Name())
	if max := topicNameMax - len(suffix); len(name) > max {
		name = name[:max]
	}
	return name + suffix
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		default:
			return '-'
		}
	}, s)
}
