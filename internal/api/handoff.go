package api

// granted is the waiters handed a slot under the waiting room's lock, to
// be woken once it is released. Waking a goroutine makes it runnable and
// may start an idle P (a futex call); done under the lock, every arrival
// and release of a crowd queued behind it, and each that found the lock
// taken parked on the mutex's semaphore and was woken again: a second
// park and wake per request on top of the one on its slot. The list is
// threaded through the waiters' own links, free once they leave the room,
// so handing over allocates nothing.
type granted struct{ head, tail *waiter }

func (g *granted) add(wt *waiter) {
	if g.tail != nil {
		g.tail.next = wt
	} else {
		g.head = wt
	}
	g.tail = wt
}

// wake sends each waiter its slot, in the order granted. A waiter may be
// recycled as soon as it has received, so its link is read before.
func (g *granted) wake() {
	for wt := g.head; wt != nil; {
		next := wt.next
		wt.next = nil
		if wt.run != nil {
			wt.run()
		} else {
			wt.ready <- struct{}{}
		}
		wt = next
	}
}
