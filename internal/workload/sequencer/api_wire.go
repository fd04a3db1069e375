package sequencer

import "encoding/json"

type messageDTO struct {
	Seq          uint64          `json:"seq"`
	ID           string          `json:"id"`
	Payload      json.RawMessage `json:"payload"`
	State        string          `json:"state"`
	Processor    string          `json:"processor,omitempty"`
	CreatedAt    string          `json:"createdAt"`
	ProcessingAt string          `json:"processingAt,omitempty"`
	ProcessedAt  string          `json:"processedAt,omitempty"`
	ReleasedAt   string          `json:"releasedAt,omitempty"`
	LeaseUntil   string          `json:"leaseUntil,omitempty"`
}

func messageOut(m *Message) messageDTO {
	p := json.RawMessage(m.Payload)
	if len(p) == 0 {
		p = json.RawMessage("null")
	}
	return messageDTO{Seq: m.Seq, ID: m.ID, Payload: p, State: m.State.String(), Processor: m.Processor,
		CreatedAt: stamp(m.Created), ProcessingAt: stamp(m.Processing), ProcessedAt: stamp(m.Processed),
		ReleasedAt: stamp(m.Released), LeaseUntil: stamp(m.LeaseUntil)}
}

func messagesOut(ms []Message) []messageDTO {
	out := make([]messageDTO, len(ms))
	for i := range ms {
		out[i] = messageOut(&ms[i])
	}
	return out
}

type consumerDTO struct {
	Name     string `json:"name"`
	Position uint64 `json:"position"`
}

type groupDTO struct {
	Name      string        `json:"name"`
	Mode      string        `json:"mode"`
	CreatedAt string        `json:"createdAt"`
	Position  uint64        `json:"position"`
	FirstKept uint64        `json:"firstKept"`
	Last      uint64        `json:"last"`
	Missing   uint64        `json:"missing,omitempty"`
	Pending   int           `json:"pending"`
	Leased    int           `json:"leased"`
	Processed int           `json:"processed"`
	Released  int           `json:"released"`
	Consumers []consumerDTO `json:"consumers"`
}

func groupOut(in *Info) groupDTO {
	d := groupDTO{Name: in.Name, Mode: in.Mode.String(), CreatedAt: stamp(in.CreatedAt), Position: in.Position,
		FirstKept: in.FirstKept, Last: in.Last, Missing: in.Missing, Pending: in.Pending, Leased: in.Leased,
		Processed: in.Processed, Released: in.Released, Consumers: make([]consumerDTO, len(in.Consumers))}
	for i, c := range in.Consumers {
		d.Consumers[i] = consumerDTO(c)
	}
	return d
}
