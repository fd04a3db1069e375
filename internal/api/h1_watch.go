package api

import (
	"context"
	"time"
)

// The lean path skips net/http's read-ahead, which cancels a request's
// context when its client goes away. Most lean requests need none:
// their wait is bounded by the engine's commit. A request that waits in
// the waiting room, though, may wait up to --max-wait, and one whose
// client has left must leave the room rather than keep its place and
// be served for no one. So a request that starts such a wait has its
// connection watched, as net/http watches every request's: a read in
// the background until the handler returns, which cancels the request
// if the client closes or the connection fails.

// h1ConnKey finds a request's lean connection in its context.
type h1ConnKey struct{}

// aLongTimeAgo is a read deadline in the past, which ends a pending read
// at once (net/http's, for the same purpose).
var aLongTimeAgo = time.Unix(1, 0)

// watchClient has the connection of r's context, if lean, cancel the
// request when its client goes away, until the handler returns. A
// request served by net/http is watched by net/http already.
func watchClient(ctx context.Context) {
	if c, ok := ctx.Value(h1ConnKey{}).(*h1Conn); ok {
		c.watch()
	}
}

// watch starts the background read, once per request. It runs on the
// handler's goroutine: serveOne's.
func (c *h1Conn) watch() {
	if c.watching || c.w == len(c.buf) || c.cancel == nil {
		return // a full buffer holds the next request: the client is there
	}
	c.watching = true
	if c.watched == nil {
		c.watched = make(chan struct{}, 1)
	}
	// The header and read timeouts bound reading the request, not
	// serving it: a wait past them is no client gone.
	c.tc.SetReadDeadline(time.Time{})
	go c.readAhead(c.cancel)
}

// readAhead reads the client's next bytes into the buffer after the
// request's, where the loop finds them: bytes mean the client is there;
// the end or an error, unless unwatch caused it, that it has gone.
func (c *h1Conn) readAhead(cancel context.CancelFunc) {
	n, err := c.tc.Read(c.buf[c.w:])
	c.w += n
	if n == 0 && err != nil && !c.unwatching.Load() {
		cancel()
	}
	c.watched <- struct{}{}
}

// unwatch ends the background read, if any, once the handler returned.
func (c *h1Conn) unwatch() {
	c.cancel = nil
	if !c.watching {
		return
	}
	c.unwatching.Store(true)
	c.tc.SetReadDeadline(aLongTimeAgo)
	<-c.watched
	c.readSet = aLongTimeAgo // the next read sets its own
	c.watching = false
	c.unwatching.Store(false)
}
