package jobs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/surge-run/surge/internal/ids"
)

// TestSnapCacheCoversEveryField: each of Job's fields is, for the
// snapshot cache, one that never changes once the job exists, one a
// pristine job has at its zero value (snapPristine), one in the print
// (appendSnapPrint), or one not encoded. A field added to Job must be
// put in one of them, or a fork could reuse an encoding that no longer
// matches the job.
func TestSnapCacheCoversEveryField(t *testing.T) {
	classes := map[string]string{
		"ID": "fixed", "Queue": "fixed", "Payload": "fixed", "CreatedAt": "fixed", "IdemKey": "fixed", "Seq": "fixed",
		"Status": "pristine", "RetryCount": "pristine", "StartedAt": "pristine", "CompletedAt": "pristine",
		"LeaseUntil": "pristine", "CancelAsked": "pristine", "Worker": "pristine", "Session": "pristine",
		"Result": "pristine", "Error": "pristine", "DeadReason": "pristine",
		"Priority": "print", "MaxRetries": "print", "NotBefore": "print", "TTLNs": "print", "TTLFrom": "print",
		"RetentionNs": "print", "nextEvent": "print", "purgeAt": "print", "heapIdx": "print",
		"Events": "print (nextEvent counts them)",
		"snap":   "not encoded",
	}
	typ := reflect.TypeFor[Job]()
	for i := range typ.NumField() {
		if _, ok := classes[typ.Field(i).Name]; !ok {
			t.Errorf("Job.%s is not classified for the snapshot cache (snapcache.go)", typ.Field(i).Name)
		}
	}
}

// TestSnapCacheReusedUntilTheJobChanges: a second fork takes a pending
// job's encoding from the first, and encodes what the live machine
// encodes; once the job is leased, cancelled or becomes ready, the fork
// encodes it afresh, again as the live machine does.
func TestSnapCacheReusedUntilTheJobChanges(t *testing.T) {
	h := newHarness(t, 1, 1, Limits{})
	m := h.Machines[0]
	var jobIDs []string
	for i := range 6 {
		s := Submit{Queue: DefaultQueue, JobID: ids.FromUint64s(9, uint64(i)).String(), Payload: []byte{byte(i)}, Priority: int32(i % 3)}
		if i == 5 {
			s.NotBeforeNs = h.Now + 5e9
		}
		h.Client("", &s)
		jobIDs = append(jobIDs, s.JobID)
	}
	// Restored, the pending jobs are live *Jobs (new ones are kept as
	// records, pending.go, which a fork shares as they are).
	if err := m.Restore(m.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	same := func(step string) {
		t.Helper()
		want := m.AppendSnapshot(nil)
		if got := m.ForkSnapshot()(nil); !bytes.Equal(got, want) {
			t.Fatalf("%s: the fork encodes another state than the machine", step)
		}
	}
	same("first fork")
	first := map[string][]byte{}
	for _, id := range jobIDs {
		first[id] = m.jobs[id].snap
		if first[id] == nil {
			t.Fatalf("pending job %s has no cached encoding after a fork", id)
		}
	}
	same("second fork")
	for _, id := range jobIDs {
		if got := m.jobs[id].snap; &got[0] != &first[id][0] {
			t.Fatalf("job %s was encoded again though it did not change", id)
		}
	}
	h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: 2, LeaseNs: 30e9})
	h.Client("", &Cancel{JobID: jobIDs[3]})
	h.Advance(6e9) // the last one becomes ready
	same("after a lease, a cancel and a job turning ready")
	changed := 0
	for _, id := range jobIDs {
		j, ok := m.jobs[id]
		if !ok || j.snap == nil || &j.snap[0] != &first[id][0] {
			changed++
		}
	}
	if changed < 4 {
		t.Fatalf("%d jobs re-encoded or dropped, want at least 4 (2 leased, 1 cancelled, 1 ready)", changed)
	}
	same("third fork")
}

// TestSnapCacheChurn: through random submits (some not yet ready, some
// with a TTL), leases, reports that fail and retry, cancels, manual
// retries and time passing, every fork of one long-lived machine encodes
// what the machine itself encodes at that moment, also when encoded
// later, after more changes: a cached encoding is never taken for a job
// that changed since it was made.
func TestSnapCacheChurn(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { snapCacheChurn(t, seed) })
	}
}

func snapCacheChurn(t *testing.T, seed uint64) {
	h := newHarness(t, seed+300, 1, Limits{MaxJobsPerQueue: 300})
	rnd := rand.New(rand.NewPCG(seed, 17))
	m := func() *Machine { return h.Machines[0] }
	var seen []string
	var forks heldForks
	cached := 0
	for step := range 1500 {
		switch op := rnd.IntN(100); {
		case op < 30:
			s := Submit{JobID: ids.FromUint64s(seed, uint64(step)).String(), Queue: DefaultQueue,
				Payload: make([]byte, rnd.IntN(2*snapCacheMaxPayload)), Priority: int32(rnd.IntN(4)), MaxRetries: int32(1 + rnd.IntN(2))}
			if rnd.IntN(3) == 0 {
				s.NotBeforeNs = h.Now + int64(1+rnd.IntN(5))*1e9
			}
			if rnd.IntN(4) == 0 {
				s.TTLNs = int64(1+rnd.IntN(8)) * 1e9
			}
			h.Client("", &s)
			seen = append(seen, s.JobID)
		case op < 45:
			r := h.Client("", &Lease{Queue: DefaultQueue, Worker: "w", Max: int32(1 + rnd.IntN(3)), LeaseNs: int64(1+rnd.IntN(4)) * 1e9})
			for _, j := range r.Jobs {
				switch rnd.IntN(3) {
				case 0:
					h.Client("", &Report{JobID: j.ID, Worker: "w", Success: rnd.IntN(3) == 0, Error: "e"})
				case 1:
					// Given back: PENDING again, as it was but for its events.
					h.Client("", &Release{Worker: "w", JobID: j.ID})
				}
			}
		case op < 52 && len(seen) > 0:
			h.Client("", &Cancel{JobID: seen[rnd.IntN(len(seen))]})
		case op < 60 && len(seen) > 0:
			h.Client("", &Retry{JobID: seen[rnd.IntN(len(seen))]})
		case op < 75:
			h.Advance(int64(rnd.IntN(1500)) * 1e6)
		case op < 95:
			forks.take(m(), step)
			for _, j := range m().jobs {
				if j.snap != nil {
					cached++
				}
			}
		case op < 99:
			forks.check(t, fmt.Sprint("step ", step))
		default:
			h.CheckReplay()
		}
	}
	forks.check(t, "at the end")
	if cached == 0 {
		t.Fatal("no fork cached a job's encoding: the test does not exercise the cache")
	}
}
