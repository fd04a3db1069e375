package auth

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
)

// DefaultMaxOpenPerToken is --max-streams-per-token's default: the
// streams and waiting calls (long polls) one token may hold open at
// once, a tenth of --max-waiters' default so that one tenant cannot take
// them all.
const DefaultMaxOpenPerToken = 1000

// Refusal reasons, the metric's label values.
const (
	reasonUnauthenticated = iota
	reasonForbidden
	reasonRateLimited
	reasonTooManyOpen
	reasonNoScope
	reasons
)

var reasonNames = [reasons]string{"unauthenticated", "forbidden", "rate_limited", "too_many_open", "no_scope"}

// Gate refuses, before the server admits a request (so a refusal costs
// no in-flight slot), every call whose token is missing, unknown or lacks
// its route's scope, and the streams past a token's limit.
type Gate struct {
	// table is swapped whole by SetTable (a reload); requests read it
	// without a lock.
	table    atomic.Pointer[Table]
	routes   *Routes
	failures *Failures
	maxOpen  int64
	// route returns the mux pattern a request matches (ServeMux.Handler).
	route   func(http.ResponseWriter, *http.Request) string
	logger  *slog.Logger
	refused [reasons]prometheus.Counter
	// unscoped logs the first request to a route without a scope.
	unscoped atomic.Bool
	errs     *connect.ErrorWriter
}

// GateConfig is what a Gate checks against.
type GateConfig struct {
	Table  *Table
	Routes *Routes
	// Route returns the mux pattern a request matches; w is its writer,
	// which may know the match already (api.LeanPattern).
	Route func(w http.ResponseWriter, r *http.Request) string
	// MaxOpen is each token's limit on open streams and waiting calls;
	// 0: DefaultMaxOpenPerToken.
	MaxOpen int
	// Failures limits failed authentications per client address; nil: a
	// new one of MaxAuthFailures per AuthFailureWindow.
	Failures *Failures
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// NewGate builds the gate; Wrap puts it in front of a handler.
func NewGate(c GateConfig) *Gate {
	g := &Gate{routes: c.Routes, route: c.Route, failures: c.Failures,
		maxOpen: int64(c.MaxOpen), logger: c.Logger, errs: connect.NewErrorWriter()}
	g.table.Store(c.Table)
	if g.maxOpen <= 0 {
		g.maxOpen = DefaultMaxOpenPerToken
	}
	if g.failures == nil {
		g.failures = NewFailures(MaxAuthFailures, AuthFailureWindow)
	}
	if g.logger == nil {
		g.logger = slog.Default()
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surge_auth_refused_total",
		Help: "Calls refused by authentication or authorization, by reason.",
	}, []string{"reason"})
	for i := range g.refused {
		g.refused[i] = vec.WithLabelValues(reasonNames[i])
	}
	if c.Registry != nil {
		c.Registry.MustRegister(vec)
	}
	return g
}

// Wrap returns next behind the gate.
func (g *Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serve(next, w, r) })
}

func (g *Gate) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	// A procedure's path is its key, so gRPC calls skip the routing
	// (which allocates: its wildcard matches).
	rt, ok := g.routes.procedure(r.URL.Path)
	var pattern string
	if !ok {
		pattern = g.route(w, r)
		rt, ok = g.routes.Find(pattern, r.URL.Path)
	}
	if !ok {
		g.refuseUnscoped(w, r, pattern)
		return
	}
	if rt.Need.Open {
		next.ServeHTTP(w, r)
		return
	}
	addr := clientAddr(r.RemoteAddr)
	if retry, blocked := g.failures.Blocked(addr); blocked {
		g.refuseRateLimited(w, r, rt, retry)
		return
	}
	p := g.table.Load().Lookup(bearer(r.Header.Get("Authorization")))
	if p == nil {
		g.failures.Fail(addr)
		g.refuseUnauthenticated(w, r, rt)
		return
	}
	if !p.Allows(rt.Need) {
		g.refused[reasonForbidden].Inc()
		g.refuse(w, r, rt, http.StatusForbidden, connect.CodePermissionDenied,
			"token "+api.Quote(p.Name)+" lacks the scope this call needs: "+rt.Need.String())
		return
	}
	if rt.LongLived {
		if p.open.Add(1) > g.maxOpen {
			p.open.Add(-1)
			g.refused[reasonTooManyOpen].Inc()
			w.Header().Set("Retry-After", "1")
			g.refuse(w, r, rt, http.StatusTooManyRequests, connect.CodeResourceExhausted,
				"token "+api.Quote(p.Name)+" has "+strconv.FormatInt(g.maxOpen, 10)+
					" streams and waiting calls open, its limit (--max-streams-per-token); close one first")
			return
		}
		defer p.open.Add(-1)
		// Counted until this returns: it must wait for its slot here.
		r = api.NoParking(r)
	}
	next.ServeHTTP(w, r)
}

func (g *Gate) refuseUnscoped(w http.ResponseWriter, r *http.Request, pattern string) {
	g.refused[reasonNoScope].Inc()
	if !g.unscoped.Swap(true) {
		g.logger.Error("a route has no scope, so every call to it is refused (a bug: routes get their scope where they are registered)",
			"route", pattern, "path", api.Quote(r.URL.Path))
	}
	api.Error(w, http.StatusForbidden, "this route has no scope configured, so no token may call it")
}

func (g *Gate) refuseRateLimited(w http.ResponseWriter, r *http.Request, rt Route, retry time.Duration) {
	g.refused[reasonRateLimited].Inc()
	secs := int64((retry + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	g.refuse(w, r, rt, http.StatusTooManyRequests, connect.CodeResourceExhausted,
		"too many failed authentications from this address (more than "+strconv.Itoa(g.failures.max)+
			" per "+g.failures.window.String()+", --max-auth-failures); retry after "+strconv.FormatInt(secs, 10)+"s with a valid token")
}

func (g *Gate) refuseUnauthenticated(w http.ResponseWriter, r *http.Request, rt Route) {
	g.refused[reasonUnauthenticated].Inc()
	msg := "this call needs a token: send Authorization: Bearer <token> (see docs/API.md, Authentication)"
	challenge := "Bearer"
	if r.Header.Get("Authorization") != "" {
		msg = "the token is not valid: it is not one of this server's tokens, or not sent as Authorization: Bearer <token>"
		challenge = `Bearer error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	g.refuse(w, r, rt, http.StatusUnauthorized, connect.CodeUnauthenticated, msg)
}

// refuse answers in the call's protocol: a gRPC, gRPC-Web or Connect
// error for procedures, JSON {"error": ...} otherwise.
func (g *Gate) refuse(w http.ResponseWriter, r *http.Request, rt Route, status int, code connect.Code, msg string) {
	if rt.RPC && g.errs.IsSupported(r) {
		_ = g.errs.Write(w, r, connect.NewError(code, errors.New(msg)))
		return
	}
	api.Error(w, status, msg)
}

// bearer is the token of an Authorization header, "" if it has none.
func bearer(h string) string {
	const scheme = "Bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return ""
	}
	return strings.TrimSpace(h[len(scheme):])
}

// clientAddr is the host of a RemoteAddr, without its port.
func clientAddr(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// SetTable replaces the tokens (a reload of the tokens file): calls from
// now on are checked against t. A token kept with the same name and
// scopes keeps its principal, so the streams it holds open still count
// against its limit; a removed token is refused at its next call.
func (g *Gate) SetTable(t *Table) {
	t.carry(g.table.Load())
	g.table.Store(t)
}
