package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/kafkatest"
)

// A command of 1.5 MB, over Kafka's default record limit, is taken by the
// owner and through a node that forwards it, and nobody's partitions move;
// one too large for any log is refused as RESOURCE_EXHAUSTED, naming the
// limit, and changes nothing either.
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
		// Two jobs of 750,000 bytes: one command of 1.5 MB.
		if err := submit(n, 2, 750_000); err != nil {
			t.Fatalf("1.5 MB through node %s: %v", n.id, err)
		}
	}
	// 11 MB: more than any log takes.
	err := submit(nodes[1], 11, 1_000_000)
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), fmt.Sprint(cmdlog.MaxEntryBytes)) {
		t.Fatalf("11 MB: got %v, want RESOURCE_EXHAUSTED naming %d", err, cmdlog.MaxEntryBytes)
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
