package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// output serves GET /v1/groups/{group}/output?after=N&limit=&wait=: the
// released messages after N; with wait, it waits for a Released note
// while there are none.
func (a *API) output(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	after, st := queryUint(w, r, "after", 0)
	if st != 0 {
		return st
	}
	limit, st := queryUint(w, r, "limit", 100)
	if st != 0 {
		return st
	}
	if limit < 1 || limit > maxReadLimit {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("limit must be from 1 to %d, got %d", maxReadLimit, limit))
	}
	wait, problem := parseWait(r.URL.Query().Get("wait"))
	if problem != "" {
		return api.Error(w, http.StatusBadRequest, problem)
	}
	ctx := r.Context()
	rs := api.OpenStream(w, r) // the wait may outlast the server's write timeout
	defer rs.Close()
	var wt *waiter
	if wait > 0 {
		wt = a.hub.waiters.AddPoll(outputKey(g))
		defer a.hub.waiters.Remove(outputKey(g), wt)
	}
	deadline := time.Now().Add(wait)
	for {
		out, err := a.readPage(ctx, g, after, int(limit))
		if err != nil {
			return engineError(w, err)
		}
		if len(out.Messages) > 0 || wt == nil || time.Until(deadline) <= 0 || !wt.Wait(ctx, a.done, time.Until(deadline)) {
			if ctx.Err() != nil {
				return 499
			}
			if !out.Found {
				return api.Error(w, http.StatusNotFound, "no group "+api.Quote(g))
			}
			next := after
			if n := len(out.Messages); n > 0 {
				next = out.Messages[n-1].Seq
			}
			err := writeMessages(ctx, rs, w, out.Messages, map[string]any{"position": out.Position, "firstKept": out.FirstKept, "after": next})
			if errors.Is(err, api.ErrStreamBusy) {
				return errBusy(w, err)
			}
			return http.StatusOK
		}
	}
}

// stream serves GET /v1/groups/{group}/output/stream?after=N as
// server-sent events, one per released message with id = seq, so a
// client that reconnects with Last-Event-ID resumes after the last one it
// got (at least once). It waits for a group nobody published to yet.
func (a *API) stream(w http.ResponseWriter, r *http.Request) int {
	g, after, st := streamFrom(w, r)
	if st != 0 {
		return st
	}
	ctx := r.Context()
	wt := a.hub.waiters.AddStream(outputKey(g))
	if wt == nil {
		api.SetRetryAfter(w, a.hub.waiters.RefusedWait())
		return api.Error(w, http.StatusServiceUnavailable, a.hub.refusedMsg()+" (Retry-After)")
	}
	defer a.hub.waiters.Remove(outputKey(g), wt)
	rs := api.OpenStream(w, r)
	defer rs.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rs.Write(nil) != nil {
		return http.StatusOK
	}
	ping := time.NewTicker(streamPing)
	defer ping.Stop()
	for {
		var ok bool
		if after, ok = a.sendReleased(ctx, rs, g, after); !ok {
			return http.StatusOK
		}
		select {
		case <-wt.C():
		case <-ping.C:
			if rs.Write([]byte(": ping\n\n")) != nil {
				return http.StatusOK
			}
		case <-ctx.Done():
			return http.StatusOK
		case <-a.done:
			endEvent(rs, api.EndShutdown, after, "the server is shutting down; reconnect with Last-Event-ID to resume")
			return http.StatusOK
		}
	}
}

// streamFrom reads a stream's group and the seq it starts after: the
// later of ?after= and Last-Event-ID. A status: the request was answered.
func streamFrom(w http.ResponseWriter, r *http.Request) (string, uint64, int) {
	g, st := pathGroup(w, r)
	if st != 0 {
		return "", 0, st
	}
	after, st := queryUint(w, r, "after", 0)
	if st != 0 {
		return "", 0, st
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 63)
		if err != nil {
			return "", 0, api.Error(w, http.StatusBadRequest, "Last-Event-ID must be a seq this stream sent, got "+api.Quote(id))
		}
		after = max(after, n)
	}
	return g, after, 0
}

// sendReleased sends the group's released messages after seq after, one
// page at a time, until it has sent every one released so far; it
// returns the last seq sent. false: the stream ends.
func (a *API) sendReleased(ctx context.Context, rs *api.Stream, g string, after uint64) (uint64, bool) {
	for {
		out, err := a.readPage(ctx, g, after, maxReadLimit)
		if err != nil {
			return after, false
		}
		if len(out.Messages) == 0 {
			return after, true
		}
		// One page at a time, each reserved from the server's stream
		// budget: a reader that does not keep up holds one page, not
		// the group's output.
		if err := rs.Reserve(ctx, pageCost(out.Messages)); err != nil {
			if errors.Is(err, api.ErrStreamBusy) {
				endEvent(rs, api.EndBusy, after, err.Error()+"; reconnect with Last-Event-ID to resume")
			}
			return after, false
		}
		if rs.Write(ssePage(out.Messages)) != nil {
			return after, false
		}
		after = out.Messages[len(out.Messages)-1].Seq
		if after >= out.Position {
			return after, true
		}
	}
}

func (a *API) commit(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	c := r.PathValue("consumer")
	if p := checkName("consumer", c, MaxIDLen); p != "" {
		return api.Error(w, http.StatusBadRequest, p)
	}
	var b struct {
		Position *uint64 `json:"position"`
	}
	if st := api.ReadJSON(w, r, maxSmallBody, &b); st != 0 {
		return st
	}
	if b.Position == nil {
		return api.Error(w, http.StatusBadRequest, "position is required: the last seq the consumer has handled")
	}
	res, st := a.do(r.Context(), w, g, &Commit{Group: g, Consumer: c, Position: *b.Position})
	if st != 0 {
		return st
	}
	return writeJSON(w, http.StatusOK, map[string]any{"consumer": c, "position": *b.Position, "released": res.Position})
}
