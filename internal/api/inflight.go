package api

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// Waiting room defaults (Limits.MaxWait, Limits.WaitingRoom).
const (
	// DefaultMaxWait is the patience: a request whose predicted wait for
	// an in-flight slot is longer is refused at once. Common clients give
	// a call 30 s including their retries (the ticketing peer's spike
	// client, go-retryablehttp users); 20 s leaves 10 s for the answer.
	// Not less: while a crowd's streams are still arriving the release
	// rate is at its slowest and the prediction 2–3× the wait that
	// follows (5 × 20,000 reservations on 2 cores: predicted 11–16 s,
	// everyone served within 8 s), and a refusal sends the client away
	// for longer than the patience.
	DefaultMaxWait = 20 * time.Second
	// DefaultWaitingRoom bounds the requests waiting at once. On the
	// lean HTTP/2 server a lean route's waiter is parked (park.go): its
	// stream record, request and waiter, ≈ 1–2 KB and no goroutine
	// (BenchmarkH2WaiterMemory), so 100,000 waiters hold ≈ 100–220 MB. On
	// net/http's servers its stream also has a handler goroutine (≈ 4 KB
	// of stack), a 4 KB response write buffer and net/http's stream,
	// request and context: ≈ 10 KB per waiter, ≈ 1 GB for 100,000.
	DefaultWaitingRoom = 100_000
	// slotWindow is how long grants are counted before the time per slot
	// is re-estimated: releases come in bursts (a log batch completes
	// many requests at once), so single intervals would swing wildly.
	slotWindow = 10 * time.Millisecond
	// fastRise: the fastest recent rate moves 1/fastRise of the way to a
	// slower window each window (half way in ≈ 0.9 s of 10 ms windows).
	fastRise = 128
	// coldSlotCPU is the time per slot release assumed before any has
	// been measured, per CPU: a compatibility reservation's POST or GET
	// costs about 50–75 µs of server CPU, so 100 µs leans slow. It spaces
	// the first crowd's tickets (see ticketLocked) until the room has
	// measured its rate, which takes one 10 ms window of hand-overs.
	coldSlotCPU = 100 * time.Microsecond
)

// Waiting room outcomes, for the metrics.
const (
	waitServed = iota
	waitRefusedFull
	waitRefusedPatience
	waitClientGone
	waitOutcomes
)

var waitOutcomeNames = [waitOutcomes]string{"served", "refused_full", "refused_patience", "client_gone"}

// inflightLimiter caps the requests being handled at once over every
// connection. Connections and h2 streams are capped too, but their product
// is far more work than the server can hold. Past the cap a request waits
// in a first-come-first-served waiting room for a slot, as long as its
// predicted wait (its place in the room × the observed time between slot
// releases) is within the patience; otherwise it is refused at once with
// a Retry-After of that predicted wait, so refused clients come back
// spread out and when there is room, not in a wave one second later.
type inflightLimiter struct {
	next     http.Handler
	max      int64
	exempt   map[string]bool
	prefixes []string
	n        atomic.Int64 // slots taken
	lent     atomic.Int64 // slots given back by handlers still writing (lend)
	lentB    atomic.Int64 // bytes those handlers have left to write
	queued   atomic.Int64 // waiters in the room: release reads it without mu
	refused  atomic.Uint64
	outcomes [waitOutcomes]atomic.Uint64
	slotNs   atomic.Int64 // smoothed time between slot releases while some wait
	fastNs   atomic.Int64 // the fastest recent slotNs: what predictions use

	patienceNs int64
	roomMax    int
	trustAfter int64 // grants before the patience is judged (see wait)
	coldSlotNs int64 // time per slot assumed until one is measured
	epoch      time.Time

	mu         sync.Mutex
	head, tail *waiter
	count      int
	winStart   int64 // when the current estimation window began (ns since epoch; -1: at the next grant)
	winGrants  int64
	grants     int64 // slots handed to waiters since the start
	// lastTicket is when the last request turned away from a full room
	// was told to come back (ns since epoch): the virtual line behind the
	// room, which costs the server nothing while it waits (ticketLocked).
	lastTicket int64
}

// waiter is one request in the room. A waiting goroutine's is pooled,
// so waiting allocates nothing; a parked request's (park) has run
// instead of ready, and is not pooled: its client-gone callback may
// still read it after the slot went to run.
type waiter struct {
	ready      chan struct{} // receives once the slot is handed over
	run        func()        // or: called, after the room's lock, with the slot
	prev, next *waiter
	granted    bool
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

func newInflightLimiter(next http.Handler, max int, exempt []string, maxWait time.Duration, room int) *inflightLimiter {
	l := &inflightLimiter{next: next, max: int64(max), exempt: map[string]bool{},
		patienceNs: int64(maxWait), roomMax: room, epoch: time.Now(),
		coldSlotNs: int64(coldSlotCPU) / int64(runtime.GOMAXPROCS(0))}
	l.trustAfter = int64(room)
	if l.trustAfter < l.max {
		l.trustAfter = l.max
	}
	for _, p := range exempt {
		if strings.HasSuffix(p, "/") {
			l.prefixes = append(l.prefixes, p)
		} else {
			l.exempt[p] = true
		}
	}
	return l
}

func (l *inflightLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.serve(w, r, l.next) }

// serve admits r to next: the server's handler, or a grpc-go call
// (Server.Admit), which share the slots and the waiting room.
func (l *inflightLimiter) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if l.isExempt(r.URL.Path) {
		next.ServeHTTP(w, r)
		return
	}
	if l.queued.Load() == 0 && l.tryTake() {
		l.runHolding(w, r, next)
		return
	}
	if pw, ok := mayPark(w, r); ok {
		if resume := pw.park(); resume != nil {
			l.park(pw, resume, r, next)
			return
		}
	}
	r, ok := l.wait(w, r)
	if !ok {
		return
	}
	l.runHolding(w, r, next)
}

// slotHolder is a ResponseWriter that can give its request's in-flight
// slot back before the handler returns (lend), once what is left is its
// client's reading of the answer.
type slotHolder interface {
	// holdSlot tells the writer its request holds a slot of l.
	holdSlot(l *inflightLimiter)
	// dropSlot, when the handler has returned, frees the slot or ends
	// its lending.
	dropSlot()
}

// runHolding runs next for r, which holds a slot, and frees the slot
// when next returns (or, through a slotHolder, earlier).
func (l *inflightLimiter) runHolding(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if h, ok := w.(slotHolder); ok {
		h.holdSlot(l)
		defer h.dropSlot()
	} else {
		defer l.release()
	}
	next.ServeHTTP(w, r)
}

// lend gives back the slot of a handler that now waits only for its
// client to read the answer (its flow-control window is shut). The slots
// bound the handlers' work: a client that does not read would otherwise
// hold its slots until the write timeout, and forty connections of 128
// such streams every slot, so that nobody else was served for 30 s. At
// most max handlers wait so at once, so that their goroutines and
// answers stay bounded as those holding slots are; beyond it a waiting
// writer keeps its slot (false), and so does one whose unwritten bytes
// (n, what its write has left) would take those of the lent answers past
// maxLentBytes. A lent slot's handler calls returnLent(n) when it
// returns.
func (l *inflightLimiter) lend(n int64) bool {
	if l.lent.Add(1) > l.max {
		l.lent.Add(-1)
		return false
	}
	if l.lentB.Add(n) > maxLentBytes {
		l.lentB.Add(-n)
		l.lent.Add(-1)
		return false
	}
	l.release()
	return true
}

// maxLentBytes bounds the answers whose handlers lent their slots: 64 MiB
// is 3,900 of the seat maps of the ticketing peer's load test, or 200 of
// its largest event's.
const maxLentBytes = 64 << 20

// returnLent: a handler that lent its slot with n bytes to write has
// returned.
func (l *inflightLimiter) returnLent(n int64) {
	l.lentB.Add(-n)
	l.lent.Add(-1)
}

func (l *inflightLimiter) tryTake() bool {
	if l.n.Add(1) <= l.max {
		return true
	}
	l.n.Add(-1)
	return false
}

// release frees a slot and, if anyone waits, hands free slots to the
// head of the room. The order (free, then read queued) pairs with wait's
// (publish queued, then take): one of the two always sees the other.
func (l *inflightLimiter) release() {
	l.n.Add(-1)
	if l.queued.Load() == 0 {
		return
	}
	var g granted
	l.mu.Lock()
	l.grantLocked(&g)
	l.mu.Unlock()
	g.wake()
}

// wait queues r for a slot, or refuses it; it reports whether r got one,
// and r as it is to be served: with the context that watches its client
// if it waited.
func (l *inflightLimiter) wait(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	wt := waiterPool.Get().(*waiter)
	switch l.enter(w, r, wt) {
	case entered:
		return r, true
	case refused:
		waiterPool.Put(wt)
		return r, false
	}
	ctx := watchClient(r.Context())
	select {
	case <-wt.ready:
		l.outcomes[waitServed].Add(1)
		l.recycle(wt)
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		return r, true
	case <-ctx.Done():
		l.leave(wt)
		return r, false
	}
}

// What enter did with a request that found every slot taken.
const (
	entered = iota // a slot was free after all: the request has it
	refused        // answered: the room is full or the wait too long
	queued         // wt is in the room
)

// enter gives r a slot, refuses it, or puts wt, prepared by the caller
// (with a channel or a run func to be handed the slot), in the room.
func (l *inflightLimiter) enter(w http.ResponseWriter, r *http.Request, wt *waiter) int {
	var g granted
	l.mu.Lock()
	l.grantLocked(&g)
	if l.head == nil && l.tryTake() {
		l.mu.Unlock()
		g.wake()
		return entered
	}
	predicted := int64(l.count+1) * l.fastNs.Load()
	switch {
	case l.count >= l.roomMax:
		n, back := l.count, l.ticketLocked()
		l.mu.Unlock()
		g.wake()
		l.refuse(w, r, waitRefusedFull, back, "the server's waiting room is full ("+strconv.Itoa(n)+
			" requests wait for one of its "+strconv.FormatInt(l.max, 10)+" in-flight slots, --waiting-room)")
		return refused
	case predicted > l.patienceNs && l.grants >= l.trustAfter:
		// Judged only once the server has handed over a full room's
		// worth of slots: while a crowd's streams arrive the release
		// rate is at its slowest (the CPU sets up streams and the woken
		// waiters queue behind them), so a cold server predicts 2–8×
		// the wait that follows, and a refusal on a wrong prediction
		// costs a client far more than a wait costs the server.
		l.mu.Unlock()
		g.wake()
		l.refuse(w, r, waitRefusedPatience, predicted, "the server is handling its limit of "+strconv.FormatInt(l.max, 10)+
			" requests at once and the predicted wait for a slot, "+seconds(predicted)+", is beyond its patience of "+
			seconds(l.patienceNs)+" (--max-wait)")
		return refused
	}
	l.push(wt)
	l.grantLocked(&g)
	l.mu.Unlock()
	g.wake()
	return queued
}

// ticketLocked gives a request turned away from a full room its place in
// a virtual line behind the room: the wait until it should come back.
// Tickets are spaced one slot release apart, starting when the room will
// be half drained, so the refused come back at the rate the room drains
// and find room, instead of all at once after the same Retry-After (a
// million refused at once would otherwise return together, be refused
// together, and spend the server on refusals). A ticket holder waits in
// its client, costing the server nothing until it returns. Before the
// room has measured its rate the cold guess spaces the tickets.
// Tickets past the patience are all given the patience.
func (l *inflightLimiter) ticketLocked() int64 {
	slot := l.ticketSlotNs()
	now := int64(time.Since(l.epoch))
	halfDrained := now + int64(l.count-l.roomMax/2)*slot
	// Never past the patience: while a crowd arrives the measured rate is
	// a fraction of what follows (a 5 × 60,000 crowd on 2 cores was given
	// tickets of 1,000 s and more, and 77 % of it gave up), and a client
	// told to wait longer than its own deadline is lost for certain, while
	// one sent back within the patience still has time if the room moved.
	l.lastTicket = min(max(l.lastTicket, halfDrained)+slot, now+l.patienceNs)
	return l.lastTicket - now
}

// virtualLine is how many tickets are still to come due: the refused
// that the server expects back.
func (l *inflightLimiter) virtualLine() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(0, (l.lastTicket-int64(time.Since(l.epoch)))/l.ticketSlotNs())
}

// ticketSlotNs spaces the tickets by the fastest recent time per slot
// release, as the patience does. The current rate is no guide while a
// crowd arrives: the CPU is busy setting up streams and releases run at a
// fraction of the rate that follows (spaced by it, 5 × 20,000 on 2 cores
// got tickets of 100 s and more for a crowd served in 15 s). Spaced too
// close, a holder that comes back to a full room is given a new ticket.
func (l *inflightLimiter) ticketSlotNs() int64 {
	if slot := l.fastNs.Load(); slot > 0 {
		return slot
	}
	return l.coldSlotNs
}

// leave takes a waiter whose client went away out of the room; if a slot
// was handed to it meanwhile, the slot goes to the next in line.
func (l *inflightLimiter) leave(wt *waiter) {
	l.outcomes[waitClientGone].Add(1)
	if l.unlinkUnlessGranted(wt) {
		<-wt.ready
		l.release()
	}
	l.recycle(wt)
}

// unlinkUnlessGranted takes wt out of the room unless a slot was handed
// to it already, and says which.
func (l *inflightLimiter) unlinkUnlessGranted(wt *waiter) (granted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !wt.granted {
		l.unlink(wt)
	}
	return wt.granted
}

func (l *inflightLimiter) recycle(wt *waiter) {
	wt.granted, wt.prev, wt.next = false, nil, nil
	waiterPool.Put(wt)
}

// grantLocked hands free slots to the room in arrival order, adding the
// waiters to g, which wakes them once the lock is released.
func (l *inflightLimiter) grantLocked(g *granted) {
	for l.head != nil && l.tryTake() {
		wt := l.head
		l.unlink(wt)
		wt.granted = true
		g.add(wt)
		l.noteGrant()
	}
}

// noteGrant learns the time per slot release: grants counted over a
// window of at least slotWindow, smoothed like the engine's slotNs.
func (l *inflightLimiter) noteGrant() {
	now := int64(time.Since(l.epoch))
	l.grants++
	if l.winStart < 0 {
		// The first grant of a busy period starts the window: the time
		// before it was the in-flight requests' own, not a release rate.
		l.winStart, l.winGrants = now, 0
		return
	}
	l.winGrants++
	el := now - l.winStart
	if el < int64(slotWindow) {
		return
	}
	est := el / l.winGrants
	if old := l.slotNs.Load(); old > 0 {
		est = old + (est-old)/4
	}
	l.slotNs.Store(est)
	// The prediction follows the fastest recent rate: it drops to a
	// faster window at once and rises slowly. A burst slows releases
	// while its streams arrive (the CPU sets them up) and they speed up
	// once it is in; judged at the slow rate, a whole crowd that would be
	// served in time is sent away for longer than its patience, while
	// admitting one that then waits too long costs only its place.
	if fast := l.fastNs.Load(); fast <= 0 || est < fast {
		l.fastNs.Store(est)
	} else {
		l.fastNs.Store(fast + (est-fast)/fastRise)
	}
	l.winStart, l.winGrants = now, 0
}

func (l *inflightLimiter) push(wt *waiter) {
	if l.count == 0 {
		l.winStart = -1 // a new busy period: see noteGrant
	}
	wt.prev, wt.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = wt
	} else {
		l.head = wt
	}
	l.tail = wt
	l.count++
	l.queued.Store(int64(l.count))
}

func (l *inflightLimiter) unlink(wt *waiter) {
	if wt.prev != nil {
		wt.prev.next = wt.next
	} else {
		l.head = wt.next
	}
	if wt.next != nil {
		wt.next.prev = wt.prev
	} else {
		l.tail = wt.prev
	}
	wt.prev, wt.next = nil, nil
	l.count--
	l.queued.Store(int64(l.count))
}

// refuse answers 503 with Retry-After = the predicted wait (at least 1 s;
// the patience while nothing has been measured yet). A gRPC, gRPC-Web or
// Connect call gets the same as its protocol's UNAVAILABLE, with the
// delay as RetryInfo and grpc-retry-pushback-ms (GRPCRetryError): a JSON
// 503 would reach a gRPC client as a bare UNAVAILABLE with no delay.
func (l *inflightLimiter) refuse(w http.ResponseWriter, r *http.Request, outcome int, predictedNs int64, why string) {
	l.outcomes[outcome].Add(1)
	l.refused.Add(1)
	if predictedNs <= 0 {
		predictedNs = l.patienceNs
	}
	if rpcErrors.IsSupported(r) {
		rpcErrors.Write(w, r, GRPCRetryError(connect.CodeUnavailable, why+"; nothing was done: retry after the RetryInfo delay", time.Duration(predictedNs)))
		return
	}
	after := RetryAfterSeconds(time.Duration(predictedNs))
	w.Header().Set("Retry-After", strconv.Itoa(after))
	Error(w, http.StatusServiceUnavailable, why+"; nothing was done: retry after "+strconv.Itoa(after)+" s (Retry-After)")
}

// rpcErrors writes refusals in the protocol of an RPC call. It asks
// Connect unary calls for their protocol header (connect-go clients send
// it): otherwise any JSON POST would look like one.
var rpcErrors = connect.NewErrorWriter(connect.WithRequireConnectProtocolHeader())

func seconds(ns int64) string {
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 1, 64) + " s"
}

// predictedNs is the wait a request arriving now would be predicted.
func (l *inflightLimiter) predictedNs() int64 {
	return (l.queued.Load() + 1) * l.fastNs.Load()
}

func (l *inflightLimiter) isExempt(path string) bool {
	if l.exempt[path] {
		return true
	}
	for _, p := range l.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// registerMetrics exports the connection and in-flight counts. They are
// read at scrape time from the counters the limiters keep anyway, so the
// request path pays nothing for them.
func registerMetrics(reg prometheus.Registerer, t *connTracker, l *inflightLimiter, b *BodyBudget) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_connections_open",
			Help: "Client connections open now.",
		}, func() float64 { return float64(t.openConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_connections_limit",
			Help: "Cap on open client connections (--max-conns, or derived from the open-file limit).",
		}, func() float64 { return float64(t.max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_connections_shed_total",
			Help: "Idle connections closed to make room for a new one at the connection cap.",
		}, func() float64 { return float64(t.shed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_connections_refused_total",
			Help: "Connections answered 503 and closed because every connection was busy at the cap.",
		}, func() float64 { return float64(t.refused.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_socket_reads_total",
			Help: "Read calls on client sockets (one that waited for data counts once, though it made two system calls); divided by surge_http_requests_total, what a request costs in reads. Small reads are served from one socket read of all the client sent.",
		}, func() float64 { return float64(t.socketReads.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_socket_writes_total",
			Help: "Write calls on client sockets; divided by surge_http_requests_total, what a reply costs in writes. On h2c the replies of handlers that finish together share writes.",
		}, func() float64 { return float64(t.socketWrites.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_requests_inflight",
			Help: "Requests being handled now (exempt paths not counted).",
		}, func() float64 { return float64(l.n.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_requests_lent",
			Help: "Handlers whose answer waits for its client's HTTP/2 window and that gave their in-flight slot back meanwhile (not in surge_http_requests_inflight; at most --max-inflight).",
		}, func() float64 { return float64(l.lent.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_requests_lent_bytes",
			Help: "Bytes those handlers have left to write (at most 64 MiB; past either bound a waiting handler keeps its slot, and loses its stream after a second without progress).",
		}, func() float64 { return float64(l.lentB.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_requests_refused_total",
			Help: "Requests answered 503 past --max-inflight: the waiting room was full or the predicted wait was beyond --max-wait.",
		}, func() float64 { return float64(l.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_waiting_requests",
			Help: "Requests waiting now for an in-flight slot (the waiting room's depth).",
		}, func() float64 { return float64(l.queued.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_waiting_virtual_requests",
			Help: "Requests turned away from the full waiting room whose Retry-After has not yet come: the virtual line behind the room, expected back at the rate the room drains.",
		}, func() float64 { return float64(l.virtualLine()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_waiting_limit",
			Help: "Cap on requests waiting for an in-flight slot (--waiting-room).",
		}, func() float64 { return float64(l.roomMax) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_waiting_predicted_seconds",
			Help: "Predicted wait for an in-flight slot of a request arriving now ((room depth + 1) × the fastest recent time per slot release).",
		}, func() float64 { return float64(l.predictedNs()) / 1e9 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_waiting_slot_seconds",
			Help: "Observed time between in-flight slot releases while requests wait (smoothed).",
		}, func() float64 { return float64(l.slotNs.Load()) / 1e9 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_body_bytes_held",
			Help: "Bytes of large request bodies held now, counted against --max-body-memory.",
		}, func() float64 { return float64(b.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_body_waits_total",
			Help: "Requests whose body waited for room under --max-body-memory before it was read.",
		}, func() float64 { return float64(b.waits.Load()) }),
	)
	for i, name := range waitOutcomeNames {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "surge_http_waiting_total",
			Help:        "Requests that found every in-flight slot taken, by outcome: served after waiting, refused because the room was full or the predicted wait beyond --max-wait, or their client went away while waiting.",
			ConstLabels: prometheus.Labels{"outcome": name},
		}, func() float64 { return float64(l.outcomes[i].Load()) }))
	}
}
