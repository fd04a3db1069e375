package engine

import (
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

func (p *partition) run() {
	defer p.e.wg.Done()
	if p.stopped != nil {
		defer close(p.stopped)
	}
	tmr := time.NewTimer(time.Hour)
	tmr.Stop()
	armed := int64(0)
	snapTmr := time.NewTimer(time.Hour)
	snapTmr.Stop()
	snapArmed := int64(0)
	stopping := false
	var resendC <-chan time.Time
	if p.e.clusterMode() {
		t := time.NewTicker(p.e.opts.Cluster.ResendAfter / 2)
		defer t.Stop()
		resendC = t.C
	}
	for {
		b := <-p.free
		b.reset()

		var timerC <-chan time.Time
		if at, ok := p.timers.next(); ok {
			if at != armed {
				tmr.Reset(time.Duration(at - p.e.now()))
				armed = at
			}
			timerC = tmr.C
		}
		var snapC <-chan time.Time
		if at, ok := p.idleSnapshotAt(); ok {
			// Re-armed also when already due: the clock may have moved
			// past it without the real timer knowing (a simulated clock).
			if d := at - p.e.now(); at != snapArmed || d <= 0 {
				snapTmr.Reset(time.Duration(d))
				snapArmed = at
			}
			snapC = snapTmr.C
		}
		var first *Request
		if !stopping {
			select {
			case first = <-p.inbox:
			case <-p.mail.signal:
			case <-timerC:
				armed = 0
			case <-resendC:
				p.resend()
			case <-snapC:
				snapArmed = 0
				p.snapshotIdle()
			case <-p.stopCh:
				stopping = true
			}
		}
		now := p.e.now()
		b.startedNano = time.Now().UnixNano()
		var waits waitSample
		// One batch holds at most MaxBatch inputs. Client requests leave
		// room for up to half of it to pending mail, so that neither
		// starves the other, and an eighth to timers already due: under a
		// flood of client requests that fills every batch (a full inbox
		// refuses at submission, so nothing else makes room), timers such
		// as a workload's retention purge would otherwise never fire.
		maxBatch := p.e.opts.MaxBatch
		timerShare := 0
		if at, ok := p.timers.next(); ok && at <= now {
			timerShare = max(1, maxBatch/8)
		}
		pendingMail := p.mail.len()
		clientMax := maxBatch - min(pendingMail, maxBatch/2) - timerShare
		// In bytes the same shares: client requests are taken only while
		// the largest legal entry still fits below clientBytes, which
		// leaves room for one of pending mail's and for due timers.
		timerBytes := 0
		if timerShare > 0 {
			timerBytes = timerBatchBytes
		}
		clientBytes := MaxBatchBytes - timerBytes
		if pendingMail > 0 {
			clientBytes -= cmdlog.MaxEntryBytes
		}
		taken := 0
		if first != nil {
			taken++
			if p.admit(first, &waits) {
				p.handle(b, first, now)
			}
		}
	drain:
		for taken < clientMax && len(b.buf)+cmdlog.MaxEntryBytes <= clientBytes {
			select {
			case r := <-p.inbox:
				taken++
				if p.admit(r, &waits) {
					p.handle(b, r, now)
				}
			default:
				break drain
			}
		}
		p.learn(&waits)
		inputs := len(b.reqs)
		if room := maxBatch - inputs - timerShare; room > 0 {
			p.mailBuf = p.mail.take(p.mailBuf[:0], room, MaxBatchBytes-timerBytes-len(b.buf))
			for i := range p.mailBuf {
				p.handleMail(b, &p.mailBuf[i], now)
			}
			inputs += len(p.mailBuf)
			clear(p.mailBuf)
		}
		p.dueKeys = p.timers.popDue(now, p.dueKeys[:0], maxBatch-inputs, MaxBatchBytes-len(b.buf))
		for _, k := range p.dueKeys {
			p.fireTimer(b, k, now)
		}
		p.commit(b)
		if stopping && len(p.inbox) == 0 {
			// Wait for every in-flight batch so Close can snapshot. In
			// cluster mode the partition may be acquired again, and its
			// next processor needs the batches back.
			var bs [maxInflightBatches]*batch
			for i := range bs {
				bs[i] = <-p.free
			}
			for _, b := range bs {
				p.free <- b
			}
			return
		}
	}
}
