package kafkatest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// createTopic makes a one-partition topic; auto-creation is off on the
// test broker, as it should be for Surge.
func createTopic(t *testing.T, ctx context.Context, brokers string) string {
	t.Helper()
	topic := kafkatest.Topic(t, "kt")
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	resp, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	return topic
}

// consumeUntil reads topic from the start at the given isolation level
// until it has seen a record with value last, and returns every value read.
func consumeUntil(t *testing.T, ctx context.Context, brokers, topic string, iso kgo.IsolationLevel, last string) []string {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consuming %s: %v; read so far: %q", topic, err, got)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
			done = done || string(r.Value) == last
		})
		if done {
			return got
		}
	}
}

func TestProduceConsume(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, brokers)

	p, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ProduceSync(ctx, kgo.StringRecord("hello")).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	got := consumeUntil(t, ctx, brokers, topic, kgo.ReadUncommitted(), "hello")
	if strings.Join(got, ",") != "hello" {
		t.Fatalf("read %q, want [hello]", got)
	}
}

// TestTransactions proves the broker's transaction config (one replica,
// min ISR 1 on the transaction state log): a read_committed consumer sees
// committed records and not aborted ones, while read_uncommitted sees both.
func TestTransactions(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, brokers)

	p := txnProducer(t, brokers, topic, kafkatest.Topic(t, "txn"))
	txn(t, ctx, p, kgo.TryCommit, "c1")
	txn(t, ctx, p, kgo.TryAbort, "a1")
	txn(t, ctx, p, kgo.TryCommit, "c2", "end")

	if got := strings.Join(consumeUntil(t, ctx, brokers, topic, kgo.ReadCommitted(), "end"), ","); got != "c1,c2,end" {
		t.Errorf("read_committed read %s, want c1,c2,end", got)
	}
	if got := strings.Join(consumeUntil(t, ctx, brokers, topic, kgo.ReadUncommitted(), "end"), ","); got != "c1,a1,c2,end" {
		t.Errorf("read_uncommitted read %s, want c1,a1,c2,end", got)
	}
}

// TestTransactionalFencing proves what cluster mode's fencing rests on: once
// a second producer initialises the same transactional id, the first can no
// longer commit anything.
func TestTransactionalFencing(t *testing.T) {
	t.Parallel()
	brokers := kafkatest.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := createTopic(t, ctx, brokers)
	id := kafkatest.Topic(t, "txn")

	old := txnProducer(t, brokers, topic, id)
	txn(t, ctx, old, kgo.TryCommit, "old-1")
	successor := txnProducer(t, brokers, topic, id)
	txn(t, ctx, successor, kgo.TryCommit, "new-1")

	if err := old.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	produceErr := old.ProduceSync(ctx, kgo.StringRecord("old-2")).FirstErr()
	commitErr := old.EndTransaction(ctx, kgo.TryCommit)
	t.Logf("fenced producer: produce error %v, commit error %v", produceErr, commitErr)
	if commitErr == nil {
		t.Fatalf("the fenced producer committed a transaction (produce error %v)", produceErr)
	}
	txn(t, ctx, successor, kgo.TryCommit, "end")
	if got := strings.Join(consumeUntil(t, ctx, brokers, topic, kgo.ReadCommitted(), "end"), ","); got != "old-1,new-1,end" {
		t.Errorf("read_committed read %s, want old-1,new-1,end", got)
	}
}

func txnProducer(t *testing.T, brokers, topic, id string) *kgo.Client {
	t.Helper()
	p, err := kgo.NewClient(
		kgo.SeedBrokers(brokers),
		kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(10*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func txn(t *testing.T, ctx context.Context, p *kgo.Client, end kgo.TransactionEndTry, values ...string) {
	t.Helper()
	if err := p.BeginTransaction(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	for _, v := range values {
		if err := p.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	if err := p.EndTransaction(ctx, end); err != nil {
		t.Fatalf("end transaction (commit=%v): %v", end, err)
	}
}

var topicName = regexp.MustCompile(`^[A-Za-z0-9-]{1,249}$`)

func TestTopicIsUniqueAndValid(t *testing.T) {
	a, b := kafkatest.Topic(t, "p"), kafkatest.Topic(t, "p")
	if a == b {
		t.Fatalf("two calls gave the same name %q", a)
	}
	t.Run("sub/test.with_odd chars", func(t *testing.T) {
		for _, prefix := range []string{"p", strings.Repeat("x", 300)} {
			n := kafkatest.Topic(t, prefix)
			if !topicName.MatchString(n) {
				t.Errorf("Topic(%.20q...) = %q: not a safe Kafka topic name", prefix, n)
			}
		}
	})
}

// TestMissingToolsFail checks that without java or mvn the helper fails,
// naming what to install, instead of skipping the cluster tests.
func TestMissingToolsFail(t *testing.T) {
	// Run in a child process: the broker state is once per binary, and the
	// child must not see a broker list (Brokers would just return it).
	if os.Getenv("KAFKATEST_CHILD") == "1" {
		kafkatest.Brokers(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestMissingToolsFail$", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, kafkatest.EnvBrokers+"=") && !strings.HasPrefix(kv, "PATH=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KAFKATEST_CHILD=1", "PATH="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit interface{ ExitCode() int }
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("child passed without java and mvn (err %v):\n%s", err, out)
	}
	for _, want := range []string{"install java", "openjdk-17", "mvn", "apt-get install maven"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child's failure does not mention %q:\n%s", want, out)
		}
	}
}
