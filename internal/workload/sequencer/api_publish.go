package sequencer

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/surge-run/surge/internal/api"
)

type publishBody struct {
	ID      *string         `json:"id"`
	Seq     uint64          `json:"seq"`
	Payload json.RawMessage `json:"payload"`
}

type publishBatchBody struct {
	publishBody
	Messages []publishBody `json:"messages"`
}

// badInput is a publish refused before anything is logged: too large
// (413, RESOURCE_EXHAUSTED) or invalid (400, INVALID_ARGUMENT).
type badInput struct {
	tooLarge bool
	msg      string
}

func (b *badInput) status() int {
	if b.tooLarge {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// publishOf checks one message (the i-th of a batch, or alone if i < 0)
// and makes its command. The HTTP routes and the gRPC call both use it.
func (a *API) publishOf(g string, b *publishBody, i int) (Publish, *badInput) {
	where := ""
	if i >= 0 {
		where = fmt.Sprintf("message %d: ", i)
	}
	if n := len(b.Payload); n > MaxPayloadBytes {
		return Publish{}, &badInput{true, fmt.Sprintf("%spayload of %d bytes is over the limit of %d", where, n, MaxPayloadBytes)}
	}
	id := ""
	if b.ID != nil {
		id = *b.ID
		if p := checkMessageID(id); p != "" {
			return Publish{}, &badInput{msg: where + p}
		}
	} else {
		id = newID()
	}
	if b.Seq > 1<<63-1 {
		return Publish{}, &badInput{msg: fmt.Sprintf("%sseq must be at most %d", where, int64(1<<63-1))}
	}
	var payload []byte
	if len(b.Payload) > 0 && string(b.Payload) != "null" {
		if p := checkPayload(b.Payload); p != "" {
			return Publish{}, &badInput{msg: where + p}
		}
		payload = []byte(b.Payload)
	}
	return Publish{Group: g, MsgID: id, Seq: b.Seq, Payload: payload, RetentionNs: int64(a.retention), MaxHeldBytes: DefaultMaxHeldBytes}, nil
}

// publishBatchOf checks a batch, all or nothing, and makes its command.
func (a *API) publishBatchOf(g string, msgs []publishBody) (*PublishBatch, *badInput) {
	if len(msgs) == 0 || len(msgs) > MaxBatch {
		return nil, &badInput{msg: fmt.Sprintf("messages must hold 1 to %d messages, got %d", MaxBatch, len(msgs))}
	}
	total := 0
	for i := range msgs {
		total += len(msgs[i].Payload)
	}
	if total > MaxBatchPayloadBytes {
		return nil, &badInput{true, fmt.Sprintf("the batch's payloads add up to %d bytes, over the limit of %d for one publish; split it into smaller batches",
			total, MaxBatchPayloadBytes)}
	}
	batch := &PublishBatch{Msgs: make([]Publish, len(msgs)), MaxHeldBytes: DefaultMaxHeldBytes}
	for i := range msgs {
		p, bad := a.publishOf(g, &msgs[i], i)
		if bad != nil {
			return nil, bad
		}
		batch.Msgs[i] = p
	}
	return batch, nil
}

// publish serves POST /v1/groups/{group}/messages: one message, or a
// batch under "messages" published all or nothing.
func (a *API) publish(w http.ResponseWriter, r *http.Request) int {
	g, st := pathGroup(w, r)
	if st != 0 {
		return st
	}
	var b publishBatchBody
	if st := api.ReadJSON(w, r, maxBatchBody, &b); st != 0 {
		return st
	}
	if b.Messages == nil {
		p, bad := a.publishOf(g, &b.publishBody, -1)
		if bad != nil {
			return api.Error(w, bad.status(), bad.msg)
		}
		res, st := a.do(r.Context(), w, g, &p)
		if st != 0 {
			return st
		}
		code := http.StatusCreated
		if res.Outcome == Same {
			code = http.StatusOK
		}
		return writeJSON(w, code, map[string]any{"seq": res.Seq, "id": p.MsgID})
	}
	if b.ID != nil || b.Seq != 0 || len(b.Payload) > 0 {
		return api.Error(w, http.StatusBadRequest, "send either one message (id, seq, payload) or a batch under \"messages\", not both")
	}
	batch, bad := a.publishBatchOf(g, b.Messages)
	if bad != nil {
		return api.Error(w, bad.status(), bad.msg)
	}
	res, st := a.do(r.Context(), w, g, batch)
	if st != 0 {
		return st
	}
	seqs := make([]uint64, len(res.Each))
	for i, e := range res.Each {
		seqs[i] = e.Seq
	}
	code := http.StatusCreated
	if res.Outcome == Same {
		code = http.StatusOK
	}
	return writeJSON(w, code, map[string]any{"seqs": seqs})
}
