package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/kafkatest"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// The largest legal submit (about 4 MB, over Kafka's default record
// limit) is taken by the owner and through a node that forwards it, and
// nobody's partitions move; a request too large for any log is refused as
// RESOURCE_EXHAUSTED, naming the limit, and changes nothing either.
func TestLargeCommandsKeepTheirPartitionOwned(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	name := kafkatest.Topic(t, "big")
	nodes := []*testNode{startNode(t, brokers, name, "a"), startNode(t, brokers, name, "b")}
	owners := waitDivided(t, nodes)
	ctx := context.Background()
	admin := jqpbconnect.NewAdminServiceClient(httpc, nodes[0].base)
	if _, err := admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: "big"})); err != nil {
		t.Fatal(err)
	}
	submit := func(n *testNode, jobs, size int) error {
		c := jqpbconnect.NewJobServiceClient(httpc, n.base)
		req := &jqpb.SubmitJobsRequest{}
		for range jobs {
			req.Jobs = append(req.Jobs, &jqpb.SubmitJobRequest{QueueName: "big", Payload: make([]byte, size)})
		}
		_, err := c.SubmitJobs(ctx, connect.NewRequest(req))
		return err
	}
	for _, n := range nodes {
		// The largest legal submit, four jobs of 1,000,000 bytes: one
		// command of about 4 MB, four times Kafka's default message size.
		if err := submit(n, 4, 1_000_000); err != nil {
			t.Fatalf("4 MB through node %s: %v", n.id, err)
		}
	}
	// 11 MB: more than any request may carry, refused at the edge before
	// it is read (its limit composes with the log's, cmdlog.MaxEntryBytes).
	err := submit(nodes[1], 11, 1_000_000)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), fmt.Sprint(jobs.MaxMessageBytes)) {
		t.Fatalf("11 MB: got %v, want RESOURCE_EXHAUSTED naming %d", err, jobs.MaxMessageBytes)
	}
	for _, n := range nodes {
		var mine []int
		for p, o := range owners {
			if o == n.id {
				mine = append(mine, p)
			}
		}
		slices.Sort(mine)
		if got := status(t, n).Owned; !slices.Equal(got, mine) {
			t.Errorf("node %s serves %v, served %v before", n.id, got, mine)
		}
	}
	if err := submit(nodes[0], 1, 100); err != nil {
		t.Fatalf("a small job after: %v", err)
	}
}
