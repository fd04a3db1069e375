package jobs_test

import (
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

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
