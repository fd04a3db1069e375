package jqpb

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The tables below are transcribed by hand from the "Wire contract" section
// of docs/API.md, not derived from the generated code, so that a
// changed field number, type, name or streaming shape in proto/jq fails
// here instead of silently breaking jq's clients. A field is written
// "name=number type", with "repeated " before the type if repeated; a
// type is a scalar kind, an enum or message of package jq, or Timestamp.

var contractEnums = map[string]string{
	"JobStatus":    "JOB_STATUS_UNSPECIFIED=0, PENDING=1, ASSIGNED=2, RUNNING=3, DONE=4, FAILED=5, DEAD_LETTERED=6",
	"WorkerStatus": "WORKER_STATUS_UNSPECIFIED=0, ONLINE=1, OFFLINE=2, DRAINING=3",
}

var contractMessages = map[string]string{
	"Job": "job_id=1 string, queue_name=2 string, payload=3 bytes, priority=4 int32, status=5 JobStatus, " +
		"max_retries=6 int32, retry_count=7 int32, created_at=8 Timestamp, started_at=9 Timestamp, " +
		"completed_at=10 Timestamp, worker_id=11 string, result=12 bytes, not_before=13 Timestamp, error_message=14 string",
	"Queue":  "name=1 string, max_retries=2 int32, ttl_seconds=3 int32, created_at=4 Timestamp",
	"Worker": "worker_id=1 string, hostname=2 string, status=3 WorkerStatus, concurrency=4 int32, active_job_count=5 int32, last_heartbeat=6 Timestamp, queues=7 repeated string",
	"JobEvent": "id=1 int64, job_id=2 string, from_status=3 JobStatus, to_status=4 JobStatus, worker_id=5 string, " +
		"reason=6 string, occurred_at=7 Timestamp",
	"QueueStats": "queue_name=1 string, pending_count=2 int64, running_count=3 int64, failed_count=4 int64, done_count=5 int64, " +
		"dead_letter_count=6 int64, total_processed=7 int64, avg_duration_ms=8 double, error_rate=9 double",
	"ComponentStatus": "name=1 string, healthy=2 bool, message=3 string",

	// JobService
	"SubmitJobRequest":     "queue_name=1 string, payload=2 bytes, priority=3 int32, max_retries=4 int32, ttl_seconds=5 int32",
	"SubmitJobResponse":    "job_id=1 string",
	"CancelJobRequest":     "job_id=1 string",
	"CancelJobResponse":    "",
	"GetJobStatusRequest":  "job_id=1 string",
	"GetJobStatusResponse": "job=1 Job",
	"ListJobsRequest":      "queue_name=1 string, status=2 JobStatus, limit=3 int32, page_token=4 string",
	"ListJobsResponse":     "jobs=1 repeated Job, next_page_token=2 string",
	"GetJobLogsRequest":    "job_id=1 string",
	"GetJobLogsResponse":   "events=1 repeated JobEvent",
	"RetryJobRequest":      "job_id=1 string",
	"RetryJobResponse":     "job_id=1 string",

	// WorkerService
	"RegisterWorkerRequest":  "worker_id=1 string, hostname=2 string, concurrency=3 int32, queues=4 repeated string",
	"RegisterWorkerResponse": "worker_id=1 string",
	"HeartbeatRequest":       "worker_id=1 string, active_job_count=2 int32",
	"HeartbeatResponse":      "",
	"StreamJobsRequest":      "worker_id=1 string, queues=2 repeated string",
	"JobAssignment":          "job_id=1 string, queue_name=2 string, payload=3 bytes, priority=4 int32",
	"ReportResultRequest":    "worker_id=1 string, job_id=2 string, success=3 bool, result=4 bytes, error_message=5 string",
	"ReportResultResponse":   "",
	"DeregisterRequest":      "worker_id=1 string",
	"DeregisterResponse":     "",

	// AdminService
	"CreateQueueRequest":      "name=1 string, max_retries=2 int32, ttl_seconds=3 int32",
	"CreateQueueResponse":     "queue=1 Queue",
	"DeleteQueueRequest":      "name=1 string, force=2 bool",
	"DeleteQueueResponse":     "",
	"ListQueuesRequest":       "",
	"ListQueuesResponse":      "queues=1 repeated Queue",
	"GetQueueStatsRequest":    "name=1 string",
	"GetQueueStatsResponse":   "stats=1 QueueStats",
	"ListWorkersRequest":      "",
	"ListWorkersResponse":     "workers=1 repeated Worker",
	"DrainWorkerRequest":      "worker_id=1 string",
	"DrainWorkerResponse":     "",
	"ShutdownWorkerRequest":   "worker_id=1 string",
	"ShutdownWorkerResponse":  "",
	"GetSystemStatusRequest":  "",
	"GetSystemStatusResponse": "healthy=1 bool, active_workers=2 int32, queue_stats=3 repeated QueueStats, components=4 repeated ComponentStatus",
}

// A method is "Input -> Output", with "stream " before a streamed side.
var contractServices = map[string]map[string]string{
	"JobService": {
		"SubmitJob":    "SubmitJobRequest -> SubmitJobResponse",
		"CancelJob":    "CancelJobRequest -> CancelJobResponse",
		"GetJobStatus": "GetJobStatusRequest -> GetJobStatusResponse",
		"ListJobs":     "ListJobsRequest -> ListJobsResponse",
		"GetJobLogs":   "GetJobLogsRequest -> GetJobLogsResponse",
		"RetryJob":     "RetryJobRequest -> RetryJobResponse",
	},
	"WorkerService": {
		"RegisterWorker": "RegisterWorkerRequest -> RegisterWorkerResponse",
		"Heartbeat":      "HeartbeatRequest -> HeartbeatResponse",
		"StreamJobs":     "StreamJobsRequest -> stream JobAssignment",
		"ReportResult":   "ReportResultRequest -> ReportResultResponse",
		"Deregister":     "DeregisterRequest -> DeregisterResponse",
	},
	"AdminService": {
		"CreateQueue":     "CreateQueueRequest -> CreateQueueResponse",
		"DeleteQueue":     "DeleteQueueRequest -> DeleteQueueResponse",
		"ListQueues":      "ListQueuesRequest -> ListQueuesResponse",
		"GetQueueStats":   "GetQueueStatsRequest -> GetQueueStatsResponse",
		"ListWorkers":     "ListWorkersRequest -> ListWorkersResponse",
		"DrainWorker":     "DrainWorkerRequest -> DrainWorkerResponse",
		"ShutdownWorker":  "ShutdownWorkerRequest -> ShutdownWorkerResponse",
		"GetSystemStatus": "GetSystemStatusRequest -> GetSystemStatusResponse",
	},
}

// Surge's additions. Fields added to contract messages must be numbered
// from 100 (so jq may grow below that without colliding); new messages and
// methods are free, since jq's clients never name them.
var extensionFields = map[string]string{
	"Queue":             "paused=100 bool",
	"SubmitJobRequest":  "idempotency_key=100 string, not_before=101 Timestamp",
	"StreamJobsRequest": "accepts_cancel=100 bool, held=101 HeldJobs",
	"HeartbeatRequest":  "held=100 HeldJobs",
	"JobAssignment":     "cancel=100 bool, ttl_seconds=101 int32, traceparent=102 string, tracestate=103 string",
}

var extensionMessages = map[string]string{
	"SubmitJobsRequest":   "jobs=1 repeated SubmitJobRequest",
	"SubmitJobsResponse":  "job_ids=1 repeated string",
	"AckJobRequest":       "worker_id=1 string, job_id=2 string",
	"HeldJobs":            "job_ids=1 repeated string",
	"AckJobResponse":      "",
	"PauseQueueRequest":   "name=1 string",
	"PauseQueueResponse":  "queue=1 Queue",
	"ResumeQueueRequest":  "name=1 string",
	"ResumeQueueResponse": "queue=1 Queue",
}

var extensionMethods = map[string]map[string]string{
	"JobService":    {"SubmitJobs": "SubmitJobsRequest -> SubmitJobsResponse"},
	"WorkerService": {"AckJob": "AckJobRequest -> AckJobResponse"},
	"AdminService": {
		"PauseQueue":  "PauseQueueRequest -> PauseQueueResponse",
		"ResumeQueue": "ResumeQueueRequest -> ResumeQueueResponse",
	},
}

// files is a function because the generated File_ variables are set in the
// package's init, after package-level variables are initialised.
func files() []protoreflect.FileDescriptor {
	return []protoreflect.FileDescriptor{
		File_jq_common_proto, File_jq_job_service_proto, File_jq_worker_service_proto, File_jq_admin_service_proto,
	}
}

// field is one parsed "name=number type" entry.
type field struct {
	name     string
	number   protoreflect.FieldNumber
	repeated bool
	kind     protoreflect.Kind
	typeName protoreflect.FullName // of an enum or message field
}

var scalarKinds = map[string]protoreflect.Kind{
	"string": protoreflect.StringKind, "bytes": protoreflect.BytesKind, "bool": protoreflect.BoolKind,
	"int32": protoreflect.Int32Kind, "int64": protoreflect.Int64Kind, "double": protoreflect.DoubleKind,
}

func parseFields(t *testing.T, spec string) []field {
	t.Helper()
	var out []field
	if spec == "" {
		return nil
	}
	for _, entry := range strings.Split(spec, ",") {
		nameNum, typ, ok := strings.Cut(strings.TrimSpace(entry), " ")
		name, num, ok2 := strings.Cut(nameNum, "=")
		n, err := strconv.Atoi(num)
		if !ok || !ok2 || err != nil {
			t.Fatalf("bad table entry %q", entry)
		}
		f := field{name: name, number: protoreflect.FieldNumber(n)}
		if rest, ok := strings.CutPrefix(typ, "repeated "); ok {
			f.repeated, typ = true, rest
		}
		switch {
		case scalarKinds[typ] != 0:
			f.kind = scalarKinds[typ]
		case typ == "Timestamp":
			f.kind, f.typeName = protoreflect.MessageKind, "google.protobuf.Timestamp"
		case contractEnums[typ] != "":
			f.kind, f.typeName = protoreflect.EnumKind, protoreflect.FullName("jq."+typ)
		default:
			_, known := contractMessages[typ]
			if _, ext := extensionMessages[typ]; !known && !ext {
				t.Fatalf("table entry %q: unknown type %q", entry, typ)
			}
			f.kind, f.typeName = protoreflect.MessageKind, protoreflect.FullName("jq."+typ)
		}
		out = append(out, f)
	}
	return out
}

func findMessage(name string) protoreflect.MessageDescriptor {
	for _, f := range files() {
		if md := f.Messages().ByName(protoreflect.Name(name)); md != nil {
			return md
		}
	}
	return nil
}

func describe(fd protoreflect.FieldDescriptor) string {
	typ := fd.Kind().String()
	switch fd.Kind() {
	case protoreflect.EnumKind:
		typ = string(fd.Enum().FullName())
	case protoreflect.MessageKind:
		typ = string(fd.Message().FullName())
	}
	if fd.IsList() {
		typ = "repeated " + typ
	}
	return fmt.Sprintf("%s=%d %s", fd.Name(), fd.Number(), typ)
}

func checkField(md protoreflect.MessageDescriptor, want field) error {
	fd := md.Fields().ByName(protoreflect.Name(want.name))
	if fd == nil {
		return fmt.Errorf("%s: no field %s", md.FullName(), want.name)
	}
	var typeName protoreflect.FullName
	switch fd.Kind() {
	case protoreflect.EnumKind:
		typeName = fd.Enum().FullName()
	case protoreflect.MessageKind:
		typeName = fd.Message().FullName()
	}
	if fd.Number() != want.number || fd.Kind() != want.kind || typeName != want.typeName ||
		fd.IsList() != want.repeated || fd.IsMap() || fd.ContainingOneof() != nil || fd.HasPresence() && fd.Kind() != protoreflect.MessageKind {
		return fmt.Errorf("%s: field is %s (map %v, oneof %v, presence %v); the contract says %s=%d %v %s (repeated %v)",
			md.FullName(), describe(fd), fd.IsMap(), fd.ContainingOneof() != nil, fd.HasPresence(),
			want.name, want.number, want.kind, want.typeName, want.repeated)
	}
	return nil
}

func TestPackageAndSyntax(t *testing.T) {
	for _, f := range files() {
		if f.Package() != "jq" || f.Syntax() != protoreflect.Proto3 {
			t.Errorf("%s: package %q, syntax %v; want package jq, proto3", f.Path(), f.Package(), f.Syntax())
		}
	}
}

func TestEnumsMatchContract(t *testing.T) {
	for name, spec := range contractEnums {
		ed := File_jq_common_proto.Enums().ByName(protoreflect.Name(name))
		if ed == nil {
			t.Errorf("no enum jq.%s", name)
			continue
		}
		var want, got []string
		for _, v := range strings.Split(spec, ",") {
			want = append(want, strings.TrimSpace(v))
		}
		for i := range ed.Values().Len() {
			v := ed.Values().Get(i)
			got = append(got, fmt.Sprintf("%s=%d", v.Name(), v.Number()))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("jq.%s values %v, contract %v", name, got, want)
		}
	}
	var n int
	for _, f := range files() {
		n += f.Enums().Len()
	}
	if n != len(contractEnums) {
		t.Errorf("%d enums in proto/jq, %d in the contract: add the new one to the tables", n, len(contractEnums))
	}
}

// Every message's fields are the contract's (same name, number, kind,
// type, cardinality) plus Surge's documented extensions numbered from 100;
// and every message in the files is in one of the tables.
func TestMessagesMatchContract(t *testing.T) {
	seen := map[string]bool{}
	check := func(name, spec string, ext string) {
		seen[name] = true
		md := findMessage(name)
		if md == nil {
			t.Errorf("no message jq.%s", name)
			return
		}
		want := parseFields(t, spec)
		extra := parseFields(t, ext)
		for _, f := range extra {
			if f.number < 100 {
				t.Errorf("%s: extension field %s has number %d; Surge's fields on jq messages are numbered from 100", name, f.name, f.number)
			}
		}
		want = append(want, extra...)
		for _, f := range want {
			if err := checkField(md, f); err != nil {
				t.Error(err)
			}
		}
		if md.Fields().Len() != len(want) {
			var got []string
			for i := range md.Fields().Len() {
				got = append(got, describe(md.Fields().Get(i)))
			}
			t.Errorf("jq.%s has fields %v; the tables list %d", name, got, len(want))
		}
	}
	for name, spec := range contractMessages {
		check(name, spec, extensionFields[name])
	}
	for name, spec := range extensionMessages {
		if _, clash := contractMessages[name]; clash {
			t.Errorf("extension message %s is also a contract message", name)
		}
		check(name, spec, "")
	}
	for name := range extensionFields {
		if _, ok := contractMessages[name]; !ok {
			t.Errorf("extension fields listed for %s, which is not a contract message", name)
		}
	}
	for _, f := range files() {
		for i := range f.Messages().Len() {
			if md := f.Messages().Get(i); !seen[string(md.Name())] {
				t.Errorf("%s: message %s is in no table", f.Path(), md.Name())
			}
		}
	}
}

func TestServicesMatchContract(t *testing.T) {
	want := map[string]map[string]string{}
	for svc, methods := range contractServices {
		want[svc] = map[string]string{}
		for m, sig := range methods {
			want[svc][m] = sig
		}
		for m, sig := range extensionMethods[svc] {
			if _, clash := methods[m]; clash {
				t.Errorf("%s.%s is both a contract and an extension method", svc, m)
			}
			want[svc][m] = sig
		}
	}
	got := map[string]map[string]string{}
	for _, f := range files() {
		for i := range f.Services().Len() {
			sd := f.Services().Get(i)
			methods := map[string]string{}
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				in, out := string(md.Input().FullName()), string(md.Output().FullName())
				if md.IsStreamingClient() {
					in = "stream " + in
				}
				if md.IsStreamingServer() {
					out = "stream " + out
				}
				methods[string(md.Name())] = in + " -> " + out
			}
			got[string(sd.Name())] = methods
		}
	}
	for svc, methods := range want {
		if got[svc] == nil {
			t.Errorf("no service jq.%s", svc)
			continue
		}
		for m, sig := range methods {
			in, out, _ := strings.Cut(sig, " -> ")
			qualify := func(s string) string {
				if rest, ok := strings.CutPrefix(s, "stream "); ok {
					return "stream jq." + rest
				}
				return "jq." + s
			}
			sig = qualify(in) + " -> " + qualify(out)
			if got[svc][m] != sig {
				t.Errorf("jq.%s/%s is %q; want %q", svc, m, got[svc][m], sig)
			}
		}
		for m := range got[svc] {
			if _, ok := methods[m]; !ok {
				t.Errorf("jq.%s/%s is in no table", svc, m)
			}
		}
	}
	for svc := range got {
		if want[svc] == nil {
			t.Errorf("service jq.%s is in no table", svc)
		}
	}
}

// The table parser and the checks must be able to fail: a contract entry
// with a wrong number, kind or cardinality is reported.
func TestCheckFieldCatchesDifferences(t *testing.T) {
	md := findMessage("Job")
	if err := checkField(md, parseFields(t, "job_id=1 string")[0]); err != nil {
		t.Fatalf("the right entry is refused: %v", err)
	}
	for _, spec := range []string{"job_id=2 string", "job_id=1 bytes", "status=5 WorkerStatus", "created_at=8 Job", "payload=3 repeated bytes"} {
		if checkField(md, parseFields(t, spec)[0]) == nil {
			t.Errorf("checkField accepted %q for jq.Job", spec)
		}
	}
}
