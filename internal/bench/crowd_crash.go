package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// crowdReadbackWorkers is how many GETs the read-back after a kill keeps
// in flight: enough to read 100,000 ids in seconds, few enough not to
// look like a second crowd.
const crowdReadbackWorkers = 64

// CrowdKill kills the server in the middle of the crowd and starts it
// again, whichever of After (from the crowd's start) and AfterDecisions
// (reservations whose GET has answered RESERVED or FAILED) comes first;
// zero turns either off. The crowd keeps going through the gap (its
// clients retry connection errors), and afterwards reads back every id a
// POST returned.
type CrowdKill struct {
	After          time.Duration
	AfterDecisions int64
	// Restart kills the server with SIGKILL and starts it again on the
	// same data dir and address, returning once it answers.
	Restart func(ctx context.Context) (CrowdRestart, error)
}

func (k *CrowdKill) validate() error {
	switch {
	case k.After < 0 || k.AfterDecisions < 0:
		return errors.New("kill trigger: the time and the decision count must not be negative")
	case k.After == 0 && k.AfterDecisions == 0:
		return errors.New("kill trigger: give a time after the crowd's start or a number of decisions")
	case k.Restart == nil:
		return errors.New("kill: no way to restart the server")
	}
	return nil
}

func (k *CrowdKill) trigger() string {
	var s string
	if k.After > 0 {
		s = k.After.String() + " after the crowd's start"
	}
	if k.AfterDecisions > 0 {
		if s != "" {
			s += " or "
		}
		s += "after " + strconv.FormatInt(k.AfterDecisions, 10) + " decisions"
	}
	return s
}

// CrowdRestart is what a restart after the kill measured.
type CrowdRestart struct {
	ReadySeconds    float64 // exec to the first healthy answer
	ReplayedRecords int64   // -1 when the server's log does not say
	RecoverySeconds float64 // the engine's own recovery time; -1 when not logged
}

// CrowdCrash is the kill -9 in the middle of the crowd and the read-back
// of every id the clients were given, on the restarted server.
type CrowdCrash struct {
	Trigger         string  `json:"trigger"`
	Killed          bool    `json:"killed"`
	KilledAtSeconds float64 `json:"killedAtSeconds"` // from the crowd's start
	// By the kill: reservations whose GET had answered, and ids that
	// POSTs had returned.
	DecisionsAtKill int64 `json:"decisionsAtKill"`
	IDsAtKill       int64 `json:"idsAtKill"`
	// RestartSeconds is from the restarted process's exec to its first
	// healthy answer; the engine's own recovery time and the records it
	// replayed are from its log (-1 when not found).
	RestartSeconds  float64 `json:"restartSeconds"`
	ReplayedRecords int64   `json:"replayedRecords"`
	RecoverySeconds float64 `json:"recoverySeconds"`
	RestartError    string  `json:"restartError,omitempty"`
	// The read-back: every id any POST returned, GET on the restarted
	// server.
	IDsChecked   int64 `json:"idsChecked"`
	ReadReserved int64 `json:"readReserved"`
	ReadFailed   int64 `json:"readFailed"`
	// LostIDs answered 404: the server handed out an id it then forgot.
	LostIDs int64 `json:"lostIds"`
	// Unreadable got no answer, another status, another state or a
	// malformed reply.
	Unreadable int64 `json:"unreadable"`
	// ChangedAnswers read back otherwise than the crowd's own GET saw
	// them (RESERVED with other seats, or the other state).
	ChangedAnswers int64 `json:"changedAnswers"`
	// WrongSeats are RESERVED with seats that break their request (count,
	// area, adjacency).
	WrongSeats int64 `json:"wrongSeats"`
	// DoubleBookings are seats that two ids read back RESERVED hold.
	DoubleBookings []DoubleBooking `json:"doubleBookings"`
	Samples        []string        `json:"samples,omitempty"`
}

// Problems says what the kill and the read-back found wrong; none when
// every id read back decided, unchanged, and no seat is held twice.
func (k *CrowdCrash) Problems() []string {
	var out []string
	if k.RestartError != "" {
		out = append(out, "restart after kill -9 failed: "+k.RestartError)
	} else if !k.Killed {
		out = append(out, "the crowd ended before the kill ("+k.Trigger+"): nothing was tested")
	}
	for _, c := range []struct {
		n    int64
		what string
	}{
		{k.LostIDs, "id(s) a POST returned read back 404 after kill -9 (LOST)"},
		{k.Unreadable, "id(s) could not be read back as RESERVED or FAILED after kill -9"},
		{k.ChangedAnswers, "id(s) read back otherwise than the crowd's GET saw them before"},
		{k.WrongSeats, "RESERVED id(s) read back with seats that break their request"},
		{int64(len(k.DoubleBookings)), "seat(s) held by two ids read back RESERVED after kill -9 (DOUBLE BOOKING)"},
	} {
		if c.n > 0 {
			out = append(out, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return out
}

// What the crowd's GET saw of a reservation.
const (
	seenNothing uint8 = iota
	seenReserved
	seenFailed
)

// crowdRecord is one reservation's id and what the crowd saw of it, kept
// for the read-back after a kill.
type crowdRecord struct {
	id    string // "" if no POST returned one
	area  int
	n     int
	seen  uint8
	seats []Seat // as the crowd's GET saw them, when RESERVED
}

// startKiller waits for the kill's trigger, then kills and restarts the
// server. cancelCrowd ends the crowd if the server does not come back,
// rather than let its clients retry for minutes. The returned wait
// returns once any restart is over.
func (c *crowdRunner) startKiller(ctx context.Context, crowdDone <-chan struct{}, cancelCrowd func()) (wait func()) {
	k := c.cfg.Kill
	done := make(chan struct{})
	go func() {
		defer close(done)
		var at <-chan time.Time
		if k.After > 0 {
			t := time.NewTimer(k.After)
			defer t.Stop()
			at = t.C
		}
		select {
		case <-at:
		case <-c.killNow:
		case <-crowdDone:
			return
		case <-ctx.Done():
			return
		}
		cr := c.crash
		cr.Killed = true
		cr.KilledAtSeconds = time.Since(c.start).Seconds()
		cr.DecisionsAtKill, cr.IDsAtKill = c.decisions.Load(), c.ids.Load()
		rs, err := k.Restart(ctx)
		if err != nil {
			cr.RestartError = err.Error()
			cancelCrowd()
			return
		}
		cr.RestartSeconds, cr.ReplayedRecords, cr.RecoverySeconds = rs.ReadySeconds, rs.ReplayedRecords, rs.RecoverySeconds
	}()
	return func() { <-done }
}

// decision counts a GET that answered RESERVED or FAILED and pulls the
// kill's trigger at the configured count.
func (c *crowdRunner) decision() {
	if n := c.decisions.Add(1); c.killNow != nil && n == c.cfg.Kill.AfterDecisions {
		close(c.killNow)
	}
}

// readbackTally is one read-back worker's findings, merged at the end.
type readbackTally struct {
	checked, reserved, failed, lost, unreadable, changed, wrong int64
	ledger                                                      Ledger
	samples                                                     []string
}

func (t *readbackTally) note(n *int64, format string, args ...any) {
	*n++
	if len(t.samples) < maxSamples {
		t.samples = append(t.samples, fmt.Sprintf(format, args...))
	}
}

// readback GETs every id a POST returned, on the restarted server, and
// checks each is RESERVED with seats that fit its request or FAILED,
// that it is what the crowd's own GET saw, and that no seat is held by
// two of them.
func (c *crowdRunner) readback(ctx context.Context) {
	per := int64(c.cfg.Reservations)
	total := int64(len(c.groups)) * per
	var next atomic.Int64
	var mu sync.Mutex
	var all []*readbackTally
	var wg sync.WaitGroup
	for w := range crowdReadbackWorkers {
		wg.Go(func() {
			t := &readbackTally{}
			var rep reservationReply
			for j := next.Add(1) - 1; j < total && ctx.Err() == nil; j = next.Add(1) - 1 {
				gr := c.groups[j/per]
				if rec := &gr.recs[j%per]; rec.id != "" {
					c.readOne(ctx, gr, gr.clients[w%len(gr.clients)], rec, &rep, t)
				}
			}
			mu.Lock()
			all = append(all, t)
			mu.Unlock()
		})
	}
	wg.Wait()
	cr := c.crash
	var ledgers []*Ledger
	for _, t := range all {
		cr.IDsChecked += t.checked
		cr.ReadReserved += t.reserved
		cr.ReadFailed += t.failed
		cr.LostIDs += t.lost
		cr.Unreadable += t.unreadable
		cr.ChangedAnswers += t.changed
		cr.WrongSeats += t.wrong
		ledgers = append(ledgers, &t.ledger)
		for _, s := range t.samples {
			if len(cr.Samples) < maxSamples {
				cr.Samples = append(cr.Samples, s)
			}
		}
	}
	cr.DoubleBookings = append(cr.DoubleBookings, FindDoubleBookings(ledgers...)...)
}

func (c *crowdRunner) readOne(ctx context.Context, gr *crowdGroup, hc *http.Client, rec *crowdRecord, rep *reservationReply, t *readbackTally) {
	t.checked++
	gctx, cancel := context.WithTimeout(ctx, c.cfg.GetTimeout)
	ans, kind, err := c.send(gctx, hc, http.MethodGet, gr.getPrefix+rec.id, nil)
	cancel()
	switch {
	case err != nil:
		t.note(&t.unreadable, "%s: %s", rec.id, kind)
		return
	case ans.status == http.StatusNotFound:
		t.note(&t.lost, "%s: 404 %s", rec.id, clip(ans.body))
		return
	case ans.status != http.StatusOK:
		t.note(&t.unreadable, "%s: status %d %s", rec.id, ans.status, clip(ans.body))
		return
	case parseReservation(ans.body, rep) != nil:
		t.note(&t.unreadable, "%s: malformed reply %s", rec.id, clip(ans.body))
		return
	}
	seen := seenNothing
	switch string(rep.state) {
	case "RESERVED":
		seen = seenReserved
		t.reserved++
		c.readReserved(gr, rec, rep, t)
	case "FAILED":
		seen = seenFailed
		t.failed++
	default:
		t.note(&t.unreadable, "%s: state %q", rec.id, clip(rep.state))
		return
	}
	if rec.seen != seenNothing && (rec.seen != seen || !sameSeats(rec.seats, rep.seats)) {
		t.note(&t.changed, "%s: the crowd saw %s %v, read back %s %v", rec.id, seenName(rec.seen), rec.seats, rep.state, rep.seats)
	}
}

// readReserved checks a RESERVED read-back against its request and
// records its seats for the double-booking check.
func (c *crowdRunner) readReserved(gr *crowdGroup, rec *crowdRecord, rep *reservationReply, t *readbackTally) {
	why := checkRandomSeats(rep.seats, rec.n, gridRows, gridCols)
	if string(rep.areaID) != strconv.Itoa(rec.area) {
		why = fmt.Sprintf("asked area %d, reply is for area %q", rec.area, rep.areaID)
	}
	if why != "" {
		t.note(&t.wrong, "%s: %s", rec.id, why)
	}
	for _, s := range rep.seats {
		if s.Row >= 0 && s.Row < gridRows && s.Col >= 0 && s.Col < gridCols {
			t.ledger.Add(gr.idx, rec.area, s)
		}
	}
}

func sameSeats(a, b []Seat) bool {
	less := func(x, y Seat) int {
		if x.Row != y.Row {
			return x.Row - y.Row
		}
		return x.Col - y.Col
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, less)
	slices.SortFunc(b, less)
	return slices.Equal(a, b)
}

func seenName(s uint8) string {
	if s == seenReserved {
		return "RESERVED"
	}
	return "FAILED"
}

// crowdProc is the crowd's `surge serve` across kills: the process
// serving now, and the CPU and peak memory of those killed before it, so
// the report's figures cover the whole crowd.
type crowdProc struct {
	r    *ticketingRun
	args []string

	mu       sync.Mutex
	now      *child
	deadCPU  float64
	deadPeak int64
	restarts int
}

func (p *crowdProc) cur() *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now
}

func (p *crowdProc) baseURL() string { return p.cur().baseURL() }

func (p *crowdProc) cpuSeconds() (float64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cpu, err := p.now.cpuSeconds()
	return p.deadCPU + cpu, err
}

func (p *crowdProc) peakRSS() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	peak, _, err := p.now.memory()
	return max(peak, p.deadPeak), err
}

// killAndRestart kills the server with SIGKILL and starts it again at
// once on the same data dir and address, with the helpers `surge bench
// restart` uses.
func (p *crowdProc) killAndRestart(ctx context.Context) (CrowdRestart, error) {
	old := p.cur()
	// Read just before the kill: a killed process's /proc entry is gone.
	cpu, cerr := old.cpuSeconds()
	peak, _, merr := old.memory()
	old.kill()
	p.mu.Lock()
	if cerr == nil {
		p.deadCPU += cpu
	}
	if merr == nil {
		p.deadPeak = max(p.deadPeak, peak)
	}
	p.restarts++
	name := fmt.Sprintf("surge-crowd-restart-%d", p.restarts)
	p.mu.Unlock()
	p.r.logf("crowd: killed surge serve with SIGKILL; restarting it on the same data dir and address")
	again, secs, err := p.r.timedStart(ctx, name, p.args, old.addr)
	if err != nil {
		return CrowdRestart{}, err
	}
	p.mu.Lock()
	p.now = again
	p.mu.Unlock()
	records, took := recoveryLine(again.logPath)
	p.r.logf("crowd: restarted surge serve answers after %.2f s (replayed %d records)", secs, records)
	return CrowdRestart{ReadySeconds: secs, ReplayedRecords: records, RecoverySeconds: took}, nil
}

// syncWriter serialises writes to the bench's log: during a kill the
// killer's lines and the crowd's progress lines come from different
// goroutines, and the caller's writer (a test's buffer) need not be safe
// for that.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
