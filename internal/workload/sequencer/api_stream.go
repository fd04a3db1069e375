package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// How the long polls and streams bound what they hold (see api.Stream):
// a read of the output takes at most api.StreamPageBytes of ids and
// payloads (ReadOutput.MaxBytes), and each page is reserved from the
// server's stream budget while it is rendered and written.

// dtoOverhead bounds what one message's JSON adds to its id and payload:
// field names, five timestamps, the state and the processor.
const dtoOverhead = 320 + MaxIDLen

// pageCost is what rendering ms takes from the stream budget.
func pageCost(ms []Message) int {
	n := 0
	for i := range ms {
		n += len(ms[i].ID) + len(ms[i].Payload) + dtoOverhead
	}
	return n
}

// pageLen is how many of ms (at least one) fit in one page.
func pageLen(ms []Message) int {
	size := 0
	for i := range ms {
		size += len(ms[i].ID) + len(ms[i].Payload)
		if size > api.StreamPageBytes && i > 0 {
			return i
		}
	}
	return len(ms)
}

// readPage reads one page of output: at most limit messages and
// api.StreamPageBytes of them.
func (a *API) readPage(ctx context.Context, group string, after uint64, limit int) (*Output, error) {
	return engine.Query[*Output](ctx, a.eng, a.part(group), WorkloadID, ReadOutput{Group: group, After: after, Limit: limit, MaxBytes: api.StreamPageBytes})
}

// errBusy answers a long poll the stream budget could not serve (err),
// with Retry-After = the wait the budget predicts for its queue.
func errBusy(w http.ResponseWriter, err error) int {
	api.SetRetryAfter(w, api.PredictedWait(err))
	return api.Error(w, http.StatusServiceUnavailable, api.ErrStreamBusy.Error()+"; nothing was taken, retry after the Retry-After pause")
}

// writeMessages answers {"messages":[...], tail's fields} page by page,
// each page reserved from the stream budget and written within the stall
// timeout, so a lease of many large messages is never rendered whole.
// Only before the first page is written may it fail with
// api.ErrStreamBusy (nothing was sent, the caller answers 503); any other
// error leaves a broken answer.
func writeMessages(ctx context.Context, st *api.Stream, w http.ResponseWriter, ms []Message, tail map[string]any) error {
	end, err := marshal(tail)
	if err != nil {
		return err
	}
	buf := []byte(`{"messages":[`)
	for i := 0; i < len(ms) || i == 0; {
		n := pageLen(ms[i:])
		if err := st.Reserve(ctx, pageCost(ms[i:i+n])); err != nil {
			if i > 0 {
				// Not ErrStreamBusy: the answer has begun, and only
				// cutting it can end it now.
				return fmt.Errorf("the answer was cut after %d messages: %v", i, err)
			}
			return err
		}
		for k := i; k < i+n; k++ {
			if k > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSON(buf, messageOut(&ms[k]))
		}
		if i += n; i == len(ms) {
			buf = append(append(append(buf, "],"...), end[1:]...), '\n')
		}
		if i == n {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
		}
		if err := st.Write(buf); err != nil {
			return err
		}
		if i == len(ms) {
			return nil
		}
		buf = buf[:0]
	}
	return nil
}

// giveBack releases seqs leased to proc whose answer did not reach it,
// at once: otherwise they stay leased, and hold the ordered output, until
// the lease runs out. The request's context may be done already.
func (a *API) giveBack(ctx context.Context, g, proc string, ms []Message) {
	if len(ms) == 0 {
		return
	}
	seqs := make([]uint64, len(ms))
	for i := range ms {
		seqs[i] = ms[i].Seq
	}
	_, _ = a.doRaw(context.WithoutCancel(ctx), g, &Release{Group: g, Processor: proc, Seqs: seqs})
}

// replyLeased answers a lease that took res.Messages; if the answer cannot
// be delivered (the client went, or the write failed or stalled) they are
// given back.
func (a *API) replyLeased(ctx context.Context, st *api.Stream, w http.ResponseWriter, g, proc string, res *Result) int {
	if ctx.Err() != nil {
		a.giveBack(ctx, g, proc, res.Messages)
		return 499 // the client went away while the lease was taken
	}
	err := writeMessages(ctx, st, w, res.Messages, map[string]any{"position": res.Position})
	if err == nil {
		return http.StatusOK
	}
	a.giveBack(ctx, g, proc, res.Messages)
	if errors.Is(err, api.ErrStreamBusy) {
		return errBusy(w, err)
	}
	return 499
}

// endEvent tells an SSE reader why the server ends its stream and where
// to resume: its id is the last seq sent, which an EventSource sends back
// as Last-Event-ID when it reconnects.
func endEvent(st *api.Stream, reason string, after uint64, why string) {
	st.Ending(reason)
	b, _ := marshal(map[string]any{"reason": reason, "lastEventId": fmt.Sprint(after), "error": why})
	_ = st.Write(fmt.Appendf(nil, "event: end\nid: %d\ndata: %s\n\n", after, b))
}

// ssePage renders messages as SSE events.
func ssePage(ms []Message) []byte {
	buf := make([]byte, 0, pageCost(ms))
	for i := range ms {
		buf = fmt.Appendf(buf, "event: message\nid: %d\ndata: ", ms[i].Seq)
		buf = append(appendJSON(buf, messageOut(&ms[i])), "\n\n"...)
	}
	return buf
}
