package jobs_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// overGRPCGoTests are the API's tests that TestAPIOverGRPCGo runs again
// with their gRPC clients talking to the grpc-go services
// (API.RegisterGRPC) instead of the connect handlers: the same calls, the
// same assertions, the other transport.
var overGRPCGoTests = map[string]func(*testing.T){
	"Lifecycle":                             TestAPILifecycle,
	"JQWorker":                              TestAPIJQWorker,
	"ConcurrencyAndPriority":                TestAPIConcurrencyAndPriority,
	"LeaseExpiry":                           TestAPILeaseExpiry,
	"CancelRunning":                         TestAPICancelRunning,
	"DrainShutdownDeregister":               TestAPIDrainShutdownDeregister,
	"SubmitKeysAndBatches":                  TestAPISubmitKeysAndBatches,
	"BadInput":                              TestAPIBadInput,
	"StreamReplaced":                        TestAPIStreamReplaced,
	"RandomCalls":                           TestAPIRandomCalls,
	"RestartedJQWorkerIsOfferedItsJobAgain": TestAPIRestartedJQWorkerIsOfferedItsJobAgain,
	"RestartedSurgeWorkerGivesBackWhatItLost":     TestAPIRestartedSurgeWorkerGivesBackWhatItLost,
	"HeartbeatsExtendOnlyHeldJobs":                TestAPIHeartbeatsExtendOnlyHeldJobs,
	"DeregisteredWorkersFreeTheirPlace":           TestAPIDeregisteredWorkersFreeTheirPlace,
	"OfflineWorkerForgottenAfterGrace":            TestAPIOfflineWorkerForgottenAfterGrace,
	"CancelWhileDisconnectedReachesTheNextStream": TestAPICancelWhileDisconnectedReachesTheNextStream,
	"SubmitJobsOverBatchTotal":                    TestAPISubmitJobsOverBatchTotal,
	"FieldRulesAcrossTransports":                  TestAPIFieldRulesAcrossTransports,
	"CollectorExportsJobsByQueueAndState":         TestCollectorExportsJobsByQueueAndState,
}

const overGRPCGoPrefix = "TestAPIOverGRPCGo/"

// noTransportLimit is far above any request the tests send.
const noTransportLimit = 64 << 20

func TestAPIOverGRPCGo(t *testing.T) {
	for name, test := range overGRPCGoTests {
		t.Run(name, test)
	}
}

// overGRPCGo reports whether t is (under) one of TestAPIOverGRPCGo's runs.
func overGRPCGo(t *testing.T) bool { return strings.HasPrefix(t.Name(), overGRPCGoPrefix) }

// serveGRPCGo serves a's services on grpc-go over h2c and returns its
// base URL. Like the connect handlers beside it, it sets no transport
// message limit, so the handlers' own refusals are what the tests see
// (the server's limits are internal/server's tests').
func serveGRPCGo(t *testing.T, a *jobs.API) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(noTransportLimit))
	a.RegisterGRPC(s)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return "http://" + ln.Addr().String()
}

// SubmitJob's grpc-go handler hands the server's interceptor one info and
// handler for every call (jobServiceDesc): calls at once through an
// interceptor each see the method and the service, and each gets its own
// job; without an interceptor the handler calls the service itself.
func TestGRPCSubmitJobInterceptedAtOnce(t *testing.T) {
	c := newAPI(t, time.Minute)
	var mu sync.Mutex
	seen := map[string]int{}
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if _, ok := info.Server.(jqpb.JobServiceServer); !ok && strings.HasPrefix(info.FullMethod, "/jq.JobService/") {
			t.Errorf("%s: info.Server is %T", info.FullMethod, info.Server)
		}
		mu.Lock()
		seen[info.FullMethod]++
		mu.Unlock()
		return h(ctx, req)
	}
	for _, opts := range [][]grpc.ServerOption{{grpc.UnaryInterceptor(icpt)}, nil} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer(opts...)
		c.api.RegisterGRPC(s)
		go s.Serve(ln)
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cl := jqpb.NewJobServiceClient(cc)
		const calls = 64
		ids := make(chan string, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				res, err := cl.SubmitJob(ctxT(t), &jqpb.SubmitJobRequest{QueueName: jobs.DefaultQueue, Payload: []byte{byte(i)}})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- res.JobId
			})
		}
		wg.Wait()
		close(ids)
		got := map[string]bool{}
		for id := range ids {
			got[id] = true
			st, err := cl.GetJobStatus(ctxT(t), &jqpb.GetJobStatusRequest{JobId: id})
			if err != nil || st.Job.GetJobId() != id {
				t.Errorf("GetJobStatus(%s) = %v, %v", id, st, err)
			}
		}
		if len(got) != calls {
			t.Errorf("%d calls made %d distinct jobs", calls, len(got))
		}
		cc.Close()
		s.Stop()
	}
	if seen[jqpb.JobService_SubmitJob_FullMethodName] != 64 || seen[jqpb.JobService_GetJobStatus_FullMethodName] != 64 {
		t.Errorf("the interceptor saw %v, want 64 SubmitJob and 64 GetJobStatus calls", seen)
	}
}
