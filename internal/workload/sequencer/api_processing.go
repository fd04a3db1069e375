package sequencer

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/surge-run/surge/internal/api"
)

type leaseBody struct {
	Processor string `json:"processor"`
	Max       int32  `json:"max"`
	LeaseMs   int64  `json:"leaseMs"`
	WaitMs    int64  `json:"waitMs"`
}

func checkLeaseMs(ms int64) (time.Duration, string) {
	if ms == 0 {
		return DefaultLease, ""
	}
	if ms < 0 || ms > MaxLease.Milliseconds() {
		return 0, fmt.Sprintf("leaseMs must be from 1 to %d, got %d", MaxLease.Milliseconds(), ms)
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// lease serves POST /v1/groups/{group}/lease: up to max messages, lowest
// seq first. While none is leasable it waits up to waitMs for a Ready
// note. A group nobody published to yet has no messages: the answer is
// an empty list, so processors may start before publishers.
func (a *API) lease(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	if b.Max == 0 {
		b.Max = 1
	}
	if b.Max < 0 || b.Max > MaxLeaseBatch {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("max must be from 1 to %d, got %d", MaxLeaseBatch, b.Max))
	}
	lease, problem := checkLeaseMs(b.LeaseMs)
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	if b.WaitMs < 0 || b.WaitMs > MaxWait.Milliseconds() {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("waitMs must be from 0 to %d, got %d", MaxWait.Milliseconds(), b.WaitMs))
	}
	ctx := r.Context()
	// The wait may outlast the server's write timeout, and the answer
	// must be known to have gone out (see replyLeased).
	rs := api.OpenStream(w, r)
	defer rs.Close()
	var wt *waiter
	if b.WaitMs > 0 {
		wt = a.hub.waiters.AddPoll(readyKey(g))
		defer a.hub.waiters.Remove(readyKey(g), wt)
	}
	deadline := time.Now().Add(time.Duration(b.WaitMs) * time.Millisecond)
	cmd := &Lease{Group: g, Processor: b.Processor, Max: b.Max, LeaseNs: int64(lease), MaxBytes: MaxLeaseBytes}
	for {
		// Not cancelled with the request: a lease taken as its client
		// goes must be known, to be given back.
		res, err := a.doRaw(context.WithoutCancel(ctx), g, cmd)
		if err != nil {
			return engineError(w, err)
		}
		if res.Outcome != NotFound {
			if st := refused(w, res); st != 0 {
				return st
			}
		}
		if len(res.Messages) > 0 || wt == nil {
			return a.replyLeased(ctx, rs, w, g, b.Processor, res)
		}
		left := time.Until(deadline)
		if left <= 0 || !wt.Wait(ctx, a.done, left) {
			if ctx.Err() != nil {
				return 499 // the client went away; nobody reads an answer
			}
			return a.replyLeased(ctx, rs, w, g, b.Processor, res)
		}
	}
}

type completeBody struct {
	Processor string   `json:"processor"`
	Seqs      []uint64 `json:"seqs"`
}

type completeDTO struct {
	Seq     uint64 `json:"seq"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// complete serves POST /v1/groups/{group}/complete: the seqs are one
// CompleteBatch, one log record and one group commit however many there
// are; the answer gives each one's outcome, and the status is the first
// refusal's if any was refused.
func (a *API) complete(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b completeBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	if len(b.Seqs) == 0 || len(b.Seqs) > MaxLeaseBatch {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("seqs must hold 1 to %d seqs, got %d", MaxLeaseBatch, len(b.Seqs)))
	}
	for _, s := range b.Seqs {
		if s == 0 || s > 1<<63-1 {
			return api.Error(w, http.StatusBadRequest, fmt.Sprintf("seq %d is not a message's seq (1 to %d)", s, int64(1<<63-1)))
		}
	}
	res, err := a.doRaw(r.Context(), g, &CompleteBatch{Group: g, Processor: b.Processor, Seqs: b.Seqs})
	if err != nil {
		return engineError(w, err)
	}
	out := make([]completeDTO, len(b.Seqs))
	code, msg := http.StatusOK, ""
	for i := range b.Seqs {
		// A refusal of the whole command (no such group) is every seq's.
		e := res
		if res.Each != nil {
			e = res.Each[i]
		}
		out[i] = completeDTO{Seq: b.Seqs[i], Outcome: e.Outcome.String()}
		if st := status(e.Outcome); st != 0 {
			out[i].Error = e.Msg
			if code == http.StatusOK {
				code, msg = st, e.Msg
			}
		}
	}
	body := map[string]any{"results": out, "position": res.Position}
	if msg != "" {
		body["error"] = msg
	}
	return writeJSON(w, code, body)
}

func (a *API) extend(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	lease, problem := checkLeaseMs(b.LeaseMs)
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	res, st := a.do(r.Context(), w, g, &Extend{Group: g, Processor: b.Processor, LeaseNs: int64(lease)})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"messages": messagesOut(res.Messages), "position": res.Position})
}

func (a *API) release(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b leaseBody
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if p := checkName("processor", b.Processor, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	res, st := a.do(r.Context(), w, g, &Release{Group: g, Processor: b.Processor})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"released": res.Outcome == OK, "position": res.Position})
}
