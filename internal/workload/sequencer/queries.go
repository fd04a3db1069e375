package sequencer

import (
	"maps"
	"slices"
	"sort"

	"github.com/surge-run/surge/internal/api"
)

// Queries (Machine.Query); each answer is a copy.
type (
	// ReadOutput → *Output: released messages with seq > After, at most
	// Limit (0: 100, at most 1000), and with MaxBytes > 0 no more than
	// that many bytes of ids and payloads but at least one message.
	ReadOutput struct {
		Group    string
		After    uint64
		Limit    int
		MaxBytes int
	}
	GroupInfo  struct{ Group string } // → *Info, nil if no such group
	ListGroups struct {               // → []*Info by name: at most Limit (0: all) above After
		After string
		Limit int
	}
)

// Output answers ReadOutput. FirstKept is the lowest seq still kept
// (Position+1 if none is): a reader asking for purged positions gets the
// output from FirstKept on and can tell it missed some.
type Output struct {
	Found     bool
	Messages  []Message
	Position  uint64
	FirstKept uint64
}

// Info describes a group. Missing is the lowest seq a gap holds the
// output at (0: no gap).
type Info struct {
	Name                                 string
	Mode                                 Mode
	CreatedAt                            int64
	Position, FirstKept, Last, Missing   uint64
	Pending, Leased, Processed, Released int // Released: kept, not purged
	Consumers                            []Consumer
}

// Consumer is a consumer's committed position.
type Consumer struct {
	Name     string
	Position uint64
}

func (m *Machine) Query(q any) any {
	switch q := q.(type) {
	case ReadOutput:
		return m.readOutput(q)
	case GroupLags:
		return m.groupLags(q)
	case GroupInfo:
		if g := m.groups[q.Group]; g != nil {
			return g.info()
		}
		return (*Info)(nil)
	case ListGroups:
		var names []string
		if q.Limit > 0 {
			names = api.Smallest(maps.Keys(m.groups), q.After, q.Limit)
		} else {
			names = slices.Sorted(maps.Keys(m.groups))
		}
		out := make([]*Info, len(names))
		for i, n := range names {
			out[i] = m.groups[n].info()
		}
		return out
	}
	return m.opsQuery(q)
}

func (m *Machine) readOutput(q ReadOutput) *Output {
	g := m.groups[q.Group]
	if g == nil {
		return &Output{}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxReadLimit)
	out := &Output{Found: true, Position: g.position, FirstKept: g.base}
	size := 0
	for seq := max(q.After+1, g.base); seq <= g.position && len(out.Messages) < limit; seq++ {
		x := g.at(seq)
		size += len(x.ID) + len(x.Payload)
		if q.MaxBytes > 0 && size > q.MaxBytes && len(out.Messages) > 0 {
			break
		}
		out.Messages = append(out.Messages, g.message(seq, x))
	}
	return out
}

func (g *Group) message(seq uint64, x *msg) Message {
	return Message{Group: g.Name, Seq: seq, ID: x.ID, Payload: x.Payload, State: x.State, Processor: x.Processor,
		Created: x.Created, Processing: x.Processing, Processed: x.Processed, Released: x.Released, LeaseUntil: x.LeaseUntil}
}

func (g *Group) info() *Info {
	in := &Info{Name: g.Name, Mode: g.Mode, CreatedAt: g.CreatedAt, Position: g.position, FirstKept: g.base, Last: g.last(),
		Pending: g.counts[MsgPending], Leased: g.counts[MsgLeased], Processed: g.counts[MsgProcessed], Released: g.counts[MsgReleased]}
	for seq := g.position + 1; g.counts[MsgGap] > 0 && seq <= g.last(); seq++ {
		if g.at(seq).State == MsgGap {
			in.Missing = seq
			break
		}
	}
	for name, p := range g.consumers {
		in.Consumers = append(in.Consumers, Consumer{Name: name, Position: p})
	}
	sort.Slice(in.Consumers, func(a, b int) bool { return in.Consumers[a].Name < in.Consumers[b].Name })
	return in
}
