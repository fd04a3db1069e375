package engine

import (
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// run is the partition's processor: it waits for something to do, builds
// one batch of client requests, mail and due timers, and commits it, until
// it is stopped and its inbox is empty.
func (p *partition) run() {
	defer p.e.wg.Done()
	if p.stopped != nil {
		defer close(p.stopped)
	}
	w := p.newWakeups()
	defer w.stop()
	stopping := false
	for {
		b := p.takeBatch()
		b.reset()
		p.runMu.Lock()
		timerC, snapC := w.arm(p)
		p.wake = w
		p.runMu.Unlock()
		// parked is set before the inbox is looked at, so a submitter
		// that finds it unset has queued in time to be seen, or kicks.
		p.parked.Store(true)
		if !stopping && (len(p.inbox) == 0 || p.coalescing()) {
			stopping = p.await(w, timerC, snapC)
		}
		p.parked.Store(false)
		p.runMu.Lock()
		p.fill(b, nil)
		if len(b.reqs) > 0 {
			p.procServed.Add(1)
		}
		p.commit(b)
		drained := len(p.inbox) == 0
		p.runMu.Unlock()
		if stopping && drained {
			p.awaitInflight()
			return
		}
	}
}

// await parks the processor until there is something to do: a kick (a
// request in the inbox, see inline.go), mail, a clock, or stop (true).
func (p *partition) await(w *wakeups, timerC, snapC <-chan time.Time) (stop bool) {
	select {
	case <-p.kick:
	case <-p.mail.signal:
	case <-timerC:
		p.runMu.Lock()
		w.timerAt = 0
		p.runMu.Unlock()
	case <-w.resend:
		p.runMu.Lock()
		p.resend()
		p.runMu.Unlock()
	case <-snapC:
		p.runMu.Lock()
		w.snapAt = 0
		p.snapshotIdle()
		p.runMu.Unlock()
	case <-p.stopCh:
		return true
	}
	return false
}

// wakeups are the processor's clocks besides its inbox and mailbox: the
// next workload timer, the idle snapshot, and (cluster mode) the re-send
// tick. timerAt and snapAt are what each timer is armed for (0: not armed).
type wakeups struct {
	timer, snap     *time.Timer
	timerAt, snapAt int64
	ticker          *time.Ticker
	resend          <-chan time.Time
}

func (p *partition) newWakeups() *wakeups {
	w := &wakeups{timer: time.NewTimer(time.Hour), snap: time.NewTimer(time.Hour)}
	w.timer.Stop()
	w.snap.Stop()
	if p.e.clusterMode() {
		w.ticker = time.NewTicker(p.e.opts.Cluster.ResendAfter / 2)
		w.resend = w.ticker.C
	}
	return w
}

func (w *wakeups) stop() {
	if w.ticker != nil {
		w.ticker.Stop()
	}
}

// arm sets the timers for the partition's next workload timer and its
// idle snapshot, and returns their channels (nil for what is not due).
func (w *wakeups) arm(p *partition) (timerC, snapC <-chan time.Time) {
	if at, ok := p.timers.next(); ok {
		if at != w.timerAt {
			w.timer.Reset(time.Duration(at - p.e.now()))
			w.timerAt = at
		}
		timerC = w.timer.C
	}
	if at, ok := p.idleSnapshotAt(); ok {
		// Re-armed also when already due: the clock may have moved
		// past it without the real timer knowing (a simulated clock).
		if d := at - p.e.now(); at != w.snapAt || d <= 0 {
			w.snap.Reset(time.Duration(d))
			w.snapAt = at
		}
		snapC = w.snap.C
	}
	return timerC, snapC
}

// batchShares divides one batch between client requests, pending mail and
// timers already due.
//
// One batch holds at most MaxBatch inputs. Client requests leave room for
// up to half of it to pending mail, so that neither starves the other, and
// an eighth to timers already due: under a flood of client requests that
// fills every batch (a full inbox refuses at submission, so nothing else
// makes room), timers such as a workload's retention purge would otherwise
// never fire. In bytes the same shares: client requests are taken only
// while the largest legal entry still fits below clientBytes, which leaves
// room for one of pending mail's and for due timers.
type batchShares struct {
	maxBatch    int
	timers      int // inputs kept for due timers
	timerBytes  int // bytes kept for them
	clients     int // the most client requests taken
	clientBytes int
}

func (p *partition) shares(now int64) batchShares {
	s := batchShares{maxBatch: p.e.opts.MaxBatch}
	if at, ok := p.timers.next(); ok && at <= now {
		s.timers = max(1, s.maxBatch/8)
		s.timerBytes = timerBatchBytes
	}
	pendingMail := p.mail.len()
	s.clients = s.maxBatch - min(pendingMail, s.maxBatch/2) - s.timers
	s.clientBytes = MaxBatchBytes - s.timerBytes
	if pendingMail > 0 {
		s.clientBytes -= cmdlog.MaxEntryBytes
	}
	return s
}

// fill builds batch b: first (if any) and the requests waiting behind it,
// then pending mail, then due timers, each within its share.
func (p *partition) fill(b *batch, first *Request) {
	now := p.e.now()
	b.startedNano = time.Now().UnixNano()
	s := p.shares(now)
	p.takeClients(b, first, now, &s)
	inputs := len(b.reqs)
	if room := s.maxBatch - inputs - s.timers; room > 0 {
		p.mailBuf = p.mail.take(p.mailBuf[:0], room, MaxBatchBytes-s.timerBytes-len(b.buf))
		for i := range p.mailBuf {
			p.handleMail(b, &p.mailBuf[i], now)
		}
		inputs += len(p.mailBuf)
		clear(p.mailBuf)
	}
	p.dueKeys = p.timers.popDue(now, p.dueKeys[:0], s.maxBatch-inputs, MaxBatchBytes-len(b.buf))
	for _, k := range p.dueKeys {
		p.fireTimer(b, k, now)
	}
}

// takeClients admits and handles first and the client requests queued
// behind it, up to the clients' share, and learns from their waits.
func (p *partition) takeClients(b *batch, first *Request, now int64, s *batchShares) {
	var waits waitSample
	taken := 0
	mono := p.e.mono()
	if first != nil {
		taken++
		if p.admit(first, &waits, mono) {
			p.handle(b, first, now)
		}
	}
drain:
	for taken < s.clients && len(b.buf)+cmdlog.MaxEntryBytes <= s.clientBytes {
		select {
		case r := <-p.inbox:
			taken++
			if p.admit(r, &waits, mono) {
				p.handle(b, r, now)
			}
		default:
			break drain
		}
	}
	p.learn(&waits)
}

// awaitInflight waits for every in-flight batch so Close can snapshot. In
// cluster mode the partition may be acquired again, and its next processor
// needs the batches back.
func (p *partition) awaitInflight() {
	var bs [maxInflightBatches]*batch
	made := bs[:p.made.Load()]
	for i := range made {
		made[i] = <-p.free
	}
	for _, b := range made {
		p.free <- b
	}
}
