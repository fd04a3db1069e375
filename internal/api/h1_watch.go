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
//
// Only a watched request has a cancellable context (watchClient returns
// it). The others get the connection's, which can never be done: a
// context of their own, cancelled when the handler returns, cost each
// request its allocation, the channel its Done makes and the closing of
// it, and made the engine's wait for the answer a two-way select where
// a plain receive does (2-3 % of a compat reservation's CPU over
// HTTP/1.1). Nothing on a lean route needs the end of its handler
// signalled: its body is too small for the body budget's hold, the only
// lean-path user of context.AfterFunc.

// h1ConnKey finds a request's lean connection in its context.
type h1ConnKey struct{}

// h1Ctx is a lean connection's context: ConnContext's values and the
// connection. Not cancellable, unlike net/http's: each request's context
// is, and a child of a cancellable parent would register with it, a map
// insertion per request. And it says so itself: a request's WithCancel
// asks its parent's Done, which through a chain of values is a call per
// value, per request (a per cent of the lean path's CPU in profiles).
type h1Ctx struct {
	values context.Context // never done (connCtx checks)
	c      *h1Conn
}

// connCtx is c's context over values, flat unless values can end (a
// ConnContext that made it cancellable), which a chain keeps honest.
func connCtx(values context.Context, c *h1Conn) context.Context {
	if _, ok := values.Deadline(); ok || values.Done() != nil {
		return context.WithValue(values, h1ConnKey{}, c)
	}
	return &h1Ctx{values: values, c: c}
}

func (x *h1Ctx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (x *h1Ctx) Done() <-chan struct{}       { return nil }
func (x *h1Ctx) Err() error                  { return nil }

func (x *h1Ctx) Value(key any) any {
	if _, ok := key.(h1ConnKey); ok {
		return x.c
	}
	return x.values.Value(key)
}

// aLongTimeAgo is a read deadline in the past, which ends a pending read
// at once (net/http's, for the same purpose).
var aLongTimeAgo = time.Unix(1, 0)

// watchClient returns ctx, a request's context, cancelled when its
// client goes away until the handler returns: on the lean path a new
// context, which the request must carry from then on; from net/http,
// which watches every request, ctx itself.
func watchClient(ctx context.Context) context.Context {
	if c, ok := ctx.Value(h1ConnKey{}).(*h1Conn); ok {
		return c.watch(ctx)
	}
	return ctx
}

// watch starts the background read, once per request, and returns the
// context it cancels. It runs on the handler's goroutine: serveOne's.
func (c *h1Conn) watch(ctx context.Context) context.Context {
	switch {
	case c.watching:
		return c.watchCtx
	case c.w == len(c.buf) || !c.serving:
		return ctx // a full buffer holds the next request: the client is there
	}
	c.watching = true
	c.watchCtx, c.watchStop = context.WithCancel(ctx)
	if c.watched == nil {
		c.watched = make(chan struct{}, 1)
	}
	// The header and read timeouts bound reading the request, not
	// serving it: a wait past them is no client gone.
	c.tc.SetReadDeadline(time.Time{})
	go c.readAhead(c.watchStop)
	return c.watchCtx
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

// unwatch ends the background read, if any, once the handler returned,
// and cancels the watched context, as net/http cancels a request's when
// its handler returns.
func (c *h1Conn) unwatch() {
	c.serving = false
	if !c.watching {
		return
	}
	c.unwatching.Store(true)
	c.tc.SetReadDeadline(aLongTimeAgo)
	<-c.watched
	c.readSet = aLongTimeAgo // the next read sets its own
	c.watchStop()
	c.watching, c.watchCtx, c.watchStop = false, nil, nil
	c.unwatching.Store(false)
}
