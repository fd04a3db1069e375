package bench

//lint:file-ignore SA1019 the crowd client reproduces the peer's, which is x/net/http2's Transport (deprecated since x/net v0.5x, which OpenTelemetry's exporters need)

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

// maxErrorKinds bounds the distinct error kinds a crowd keeps apart; the
// rest are counted as one "other" kind.
const maxErrorKinds = 64

// crowdTally is what every reservation of a crowd adds to, from up to a
// million goroutines: atomics for the hot counters, a mutex for the maps.
type crowdTally struct {
	posts, gets, retries atomic.Int64
	dials                atomic.Int64

	mu         sync.Mutex
	refusals   map[int]int64    // 429 and 5xx answers, retried or not
	retryAfter map[string]int64 // the Retry-After of each refusal ("" when absent)
	errors     map[string]int64 // reservations that ended in an error, by kind
	// attemptErrors counts transport errors of single attempts, retried
	// or not, by kind: what the retries were spent on besides refusals.
	attemptErrors map[string]int64
	samples       []string
}

func newCrowdTally() *crowdTally {
	return &crowdTally{refusals: map[int]int64{}, retryAfter: map[string]int64{}, errors: map[string]int64{}, attemptErrors: map[string]int64{}}
}

// reset zeroes the request counts of the set-up; dials keep counting, as
// the connections the health checks opened serve the crowd too.
func (t *crowdTally) reset() {
	t.posts.Store(0)
	t.gets.Store(0)
	t.retries.Store(0)
	t.mu.Lock()
	clear(t.refusals)
	clear(t.retryAfter)
	clear(t.errors)
	clear(t.attemptErrors)
	t.samples = nil
	t.mu.Unlock()
}

func (t *crowdTally) refused(status int, retryAfter string) {
	t.mu.Lock()
	t.refusals[status]++
	t.retryAfter[retryAfter]++
	t.mu.Unlock()
}

func (t *crowdTally) attemptFailed(err error) {
	kind := errorKind(err)
	t.mu.Lock()
	if _, ok := t.attemptErrors[kind]; !ok && len(t.attemptErrors) >= maxErrorKinds {
		kind = "other"
	}
	t.attemptErrors[kind]++
	t.mu.Unlock()
}

func (t *crowdTally) fail(kind, detail string) {
	t.mu.Lock()
	if _, ok := t.errors[kind]; !ok && len(t.errors) >= maxErrorKinds {
		kind = "other"
	}
	t.errors[kind]++
	if len(t.samples) < maxSamples {
		t.samples = append(t.samples, kind+": "+detail)
	}
	t.mu.Unlock()
}

// newCrowdClient is one of the peer's HTTP clients: an x/net/http2
// Transport with AllowHTTP dialing plain TCP (h2c with prior knowledge),
// no timeouts of its own (the per-request contexts bound everything). With
// StrictMaxConcurrentStreams false its pool opens another connection when
// every open one is at the server's stream limit, one dial at a time.
// (net/http's own h2c Transport would not do: a burst past the limit
// makes it dial once per waiting request, tens of thousands of
// connections where the peer's client opens a few hundred.)
//
// With tlsCfg (an https:// server: `surge serve --tls-cert`) every
// transport speaks TLS, HTTP/2 by ALPN for the HTTP/2 ones.
func newCrowdClient(dials *atomic.Int64, transport string, tlsCfg *tls.Config) *http.Client {
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	switch transport {
	case CrowdTransportNetHTTP:
		return newNetHTTPCrowdClient(d, dials, tlsCfg)
	case CrowdTransportHTTP1:
		return newHTTP1CrowdClient(dials, tlsCfg)
	}
	tr := &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			dials.Add(1)
			if tlsCfg != nil {
				return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, network, addr)
			}
			return d.DialContext(ctx, network, addr)
		},
	}
	if tlsCfg != nil {
		tr.TLSClientConfig = tlsCfg.Clone()
		tr.TLSClientConfig.NextProtos = []string{"h2"}
	}
	return &http.Client{Transport: tr}
}

// newNetHTTPCrowdClient is net/http's own h2c client, for comparison: a
// client written with it instead of x/net/http2 meets the same server with
// a storm of connections.
func newNetHTTPCrowdClient(d *net.Dialer, dials *atomic.Int64, tlsCfg *tls.Config) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		DisableCompression: true,
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	if tlsCfg != nil {
		p.SetHTTP2(true)
		tr.TLSClientConfig = tlsCfg
	}
	tr.Protocols = &p
	return &http.Client{Transport: tr}
}

// newHTTP1CrowdClient is the peer's client without --http2: go-retryablehttp's
// default, hashicorp/go-cleanhttp's pooled Transport, over HTTP/1.1 (its
// ForceAttemptHTTP2 only matters for TLS). It keeps GOMAXPROCS+1 idle
// connections for 90 s and has no cap on open ones, so a crowd dials one
// connection per request in flight and closes most of them again.
func newHTTP1CrowdClient(dials *atomic.Int64, tlsCfg *tls.Config) *http.Client {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   runtime.GOMAXPROCS(0) + 1,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
		TLSClientConfig:       tlsCfg,
	}
	return &http.Client{Transport: tr}
}

// crowdAnswer is the last answer of a request and its retries.
type crowdAnswer struct {
	status int
	body   []byte
}

// send is retryablehttp's Client.Do with the peer's rules: it sends the
// request, retries what rules.shouldRetry says after rules.backoff, and
// gives up after rules.Max retries or when ctx ends. It returns the first
// answer not to retry; an error's kind names why it ended.
func (c *crowdRunner) send(ctx context.Context, hc *http.Client, method, url string, body []byte) (crowdAnswer, string, error) {
	var last crowdAnswer
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			c.tally.retries.Add(1)
		}
		if method == http.MethodPost {
			c.tally.posts.Add(1)
		} else {
			c.tally.gets.Add(1)
		}
		var retryAfter string
		last, retryAfter, lastErr = c.attempt(ctx, hc, method, url, body)
		switch {
		case lastErr != nil && ctx.Err() == nil:
			c.tally.attemptFailed(lastErr)
		case lastErr == nil && (last.status == http.StatusTooManyRequests || last.status >= 500):
			c.tally.refused(last.status, retryAfter)
		}
		if ctx.Err() != nil {
			return last, method + " deadline exceeded", ctx.Err()
		}
		if !c.rules.shouldRetry(ctx, last.status, lastErr) {
			if lastErr != nil {
				return last, method + " " + errorKind(lastErr), lastErr
			}
			return last, "", nil
		}
		if attempt >= c.rules.Max {
			why := fmt.Sprintf("status %d", last.status)
			if lastErr != nil {
				why = errorKind(lastErr)
			}
			return last, fmt.Sprintf("%s gave up after %d attempts (last: %s)", method, attempt+1, why),
				fmt.Errorf("%w after %d attempt(s): %s", errGaveUp, attempt+1, why)
		}
		t := time.NewTimer(c.rules.backoff(attempt, last.status, retryAfter))
		select {
		case <-ctx.Done():
			t.Stop()
			return last, method + " deadline exceeded", ctx.Err()
		case <-t.C:
		}
	}
}

// attempt sends once and reads the whole answer. A reply that fails to
// read is retried like a transport error; retryablehttp would hand that
// body to its caller unread, a difference only for a connection lost in
// the middle of a reply.
func (c *crowdRunner) attempt(ctx context.Context, hc *http.Client, method, url string, body []byte) (crowdAnswer, string, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return crowdAnswer{}, "", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return crowdAnswer{}, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return crowdAnswer{}, "", err
	}
	return crowdAnswer{status: resp.StatusCode, body: b}, resp.Header.Get("Retry-After"), nil
}

var addrPattern = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)

// errorKind names a transport error without the URL and addresses that
// would make every occurrence a kind of its own.
func errorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline exceeded"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, syscall.EMFILE):
		return "too many open files"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection closed (EOF)"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if len(msg) > 80 {
		msg = msg[:80]
	}
	return msg
}
