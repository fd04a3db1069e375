package sequencer

import (
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// hist is a log-linear histogram of non-negative durations in ns: exact
// below 128 ns, then 64 buckets per power of two (under 1.6 % error).
// Its size does not depend on how many values it holds, so stats over a
// million messages cost the same memory as over ten. Not hdrhistogram:
// it allocates every bucket of its range up front (about 37 KB for 1 ns
// to 1 h at two significant figures), five stages a group, and a
// benchmark may run 10,000 groups; this one grows to the buckets used.
type hist struct {
	counts   []uint64
	n        uint64
	sum      float64
	min, max int64
}

const histSub = 64

func histIndex(v int64) int {
	if v < 2*histSub {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 7 // v>>e is in [64, 128)
	return 2*histSub + (e-1)*histSub + int(uint64(v)>>e) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) int64 {
	if i < 2*histSub {
		return int64(i)
	}
	e := (i-2*histSub)/histSub + 1
	m := int64((i-2*histSub)%histSub + histSub)
	return m<<e + (int64(1)<<e)/2
}

func (h *hist) add(v int64) {
	v = max(v, 0)
	i := histIndex(v)
	if i >= len(h.counts) {
		h.counts = slices.Grow(h.counts, i+1-len(h.counts))[:i+1]
	}
	h.counts[i]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
}

// quantile q in [0, 1]: the value at rank ceil(q·n), within the
// bucket's error, and never outside [min, max].
func (h *hist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(max(histValue(i), h.min), h.max)
		}
	}
	return h.max
}

type stageDTO struct {
	Count   uint64  `json:"count"`
	P50     float64 `json:"p50"`
	P90     float64 `json:"p90"`
	P95     float64 `json:"p95"`
	P99     float64 `json:"p99"`
	Average float64 `json:"average"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
}

func ms(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

func (h *hist) out() stageDTO {
	d := stageDTO{Count: h.n, P50: ms(h.quantile(.5)), P90: ms(h.quantile(.9)), P95: ms(h.quantile(.95)),
		P99: ms(h.quantile(.99)), Min: ms(h.min), Max: ms(h.max)}
	if h.n > 0 {
		d.Average = ms(int64(h.sum / float64(h.n)))
	}
	return d
}

// The stages the peer reports. "sequencing" is when the machine released
// the message (its input time); "sequenced" when the API saw that release
// durable (the Released note), or the release time if no note was seen
// (a group not created through POST /messages, or after a restart).
const (
	stCreatedProcessing = iota
	stProcessingProcessed
	stProcessedSequencing
	stSequencingSequenced
	stCreatedSequenced
	numStages
)

var stageNames = [numStages]string{"createdToProcessing", "processingToProcessed", "processedToSequencing",
	"sequencingToSequenced", "createdToSequenced"}

// stats accumulates a group's released output, message by message in
// seq order.
type stats struct {
	name       string
	tr         *tracker
	info       *Info
	sent       int
	publishErr string
	publishing bool
	stages     [numStages]hist
	count      uint64
	first      uint64 // lowest seq read
	// order check
	ordered    bool
	brokeAt    uint64
	reason     string
	prevSeq    uint64
	prevRel    int64
	prevSeqd   int64
	firstAt    int64 // earliest created
	lastAt     int64 // latest sequenced
	processing map[int64]uint64
	sequenced  map[int64]uint64
}

func newStats(name string, tr *tracker) *stats {
	return &stats{name: name, tr: tr, ordered: true, processing: map[int64]uint64{}, sequenced: map[int64]uint64{}}
}

func (s *stats) add(m *Message) {
	seqd := int64(0)
	if s.tr != nil {
		seqd = s.tr.at(m.Seq)
	}
	if seqd == 0 {
		seqd = m.Released
	}
	s.stages[stCreatedProcessing].add(m.Processing - m.Created)
	s.stages[stProcessingProcessed].add(m.Processed - m.Processing)
	s.stages[stProcessedSequencing].add(m.Released - m.Processed)
	s.stages[stSequencingSequenced].add(seqd - m.Released)
	s.stages[stCreatedSequenced].add(seqd - m.Created)
	if s.count == 0 {
		s.first, s.firstAt = m.Seq, m.Created
	}
	s.firstAt = min(s.firstAt, m.Created)
	s.lastAt = max(s.lastAt, seqd)
	s.processing[m.Processed/1e9]++
	s.sequenced[seqd/1e9]++
	s.check(m, seqd)
	s.count++
	s.prevSeq, s.prevRel, s.prevSeqd = m.Seq, m.Released, seqd
}

// check is the order check: seqs follow one another, a benchmark
// message's id (name-<creation index>) is its seq, and release times
// never go back.
func (s *stats) check(m *Message, seqd int64) {
	if !s.ordered {
		return
	}
	broke := func(why string) { s.ordered, s.brokeAt, s.reason = false, m.Seq, why }
	switch {
	case s.count > 0 && m.Seq != s.prevSeq+1:
		broke("seq " + strconv.FormatUint(m.Seq, 10) + " follows " + strconv.FormatUint(s.prevSeq, 10))
	case s.sent > 0 && m.ID != s.name+"-"+strconv.FormatUint(m.Seq, 10):
		broke("message " + strconv.Quote(m.ID) + " is at seq " + strconv.FormatUint(m.Seq, 10))
	case s.count > 0 && (m.Released < s.prevRel || seqd < s.prevSeqd):
		broke("released before the message ahead of it")
	}
}

type statsDTO struct {
	Name       string              `json:"name"`
	Sent       int                 `json:"sent,omitempty"`
	Publishing bool                `json:"publishing,omitempty"`
	Error      string              `json:"error,omitempty"`
	Count      uint64              `json:"count"`
	FirstSeq   uint64              `json:"firstSeq"`
	Pending    int                 `json:"pending"`
	Leased     int                 `json:"leased"`
	Processed  int                 `json:"processed"`
	Missing    uint64              `json:"missing,omitempty"`
	Unit       string              `json:"unit"`
	Stages     map[string]stageDTO `json:"stages"`
	IsOrdered  bool                `json:"isOrdered"`
	BrokeAt    uint64              `json:"brokeAt,omitempty"`
	Reason     string              `json:"reason,omitempty"`
}

func (s *stats) statsOut() statsDTO {
	d := statsDTO{Name: s.name, Sent: s.sent, Publishing: s.publishing, Error: s.publishErr, Count: s.count, FirstSeq: s.first,
		Unit: "ms", Stages: map[string]stageDTO{}, IsOrdered: s.ordered, BrokeAt: s.brokeAt, Reason: s.reason}
	if s.info != nil {
		d.Pending, d.Leased, d.Processed, d.Missing = s.info.Pending, s.info.Leased, s.info.Processed, s.info.Missing
	}
	for i := range s.stages {
		d.Stages[stageNames[i]] = s.stages[i].out()
	}
	return d
}

type secondDTO struct {
	Second int64  `json:"second"` // Unix time
	Count  uint64 `json:"count"`
}

type perfsDTO struct {
	Name       string      `json:"name"`
	Count      uint64      `json:"count"`
	Processing []secondDTO `json:"processing"`
	Sequencing []secondDTO `json:"sequencing"`
	// AverageRate: messages per second from the first created to the
	// last sequenced; the per-second averages are over the seconds that
	// saw any.
	AverageRate       float64 `json:"averageRate"`
	AverageProcessing float64 `json:"averageProcessingPerSecond"`
	AverageSequencing float64 `json:"averageSequencingPerSecond"`
	DurationMs        float64 `json:"durationMs"`
}

func seconds(m map[int64]uint64) ([]secondDTO, float64) {
	out := make([]secondDTO, 0, len(m))
	var total uint64
	for k, v := range m {
		out = append(out, secondDTO{k, v})
		total += v
	}
	slices.SortFunc(out, func(x, y secondDTO) int { return int(x.Second - y.Second) })
	if len(out) == 0 {
		return out, 0
	}
	return out, float64(total) / float64(len(out))
}

func (s *stats) perfsOut() perfsDTO {
	d := perfsDTO{Name: s.name, Count: s.count}
	d.Processing, d.AverageProcessing = seconds(s.processing)
	d.Sequencing, d.AverageSequencing = seconds(s.sequenced)
	if s.count > 0 {
		span := s.lastAt - s.firstAt
		d.DurationMs = ms(span)
		d.AverageRate = math.Round(float64(s.count)/math.Max(float64(span)/1e9, 1e-3)*10) / 10
	}
	return d
}
