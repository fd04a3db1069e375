package bench

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"
)

// The ticketing peer's spike client wraps its HTTP clients in
// hashicorp/go-retryablehttp with its defaults except RetryMax. These are
// those settings; the crowd bench reproduces the client's behaviour, so
// they are the peer's, not tunables.
const (
	crowdRetryMax     = 20              // retries after the first attempt
	crowdRetryWaitMin = 1 * time.Second // retryablehttp's RetryWaitMin
	crowdRetryWaitMax = 30 * time.Second
	// The peer's deadlines: each POST with all its retries and waits must
	// finish in crowdPostTimeout, each GET in crowdGetTimeout.
	crowdPostTimeout = 30 * time.Second
	crowdGetTimeout  = 300 * time.Second
)

// retryRules are go-retryablehttp's DefaultRetryPolicy and DefaultBackoff:
// which answers are tried again and how long the client waits first.
type retryRules struct {
	Max     int // retries after the first attempt
	WaitMin time.Duration
	WaitMax time.Duration
}

func peerRetryRules() retryRules {
	return retryRules{Max: crowdRetryMax, WaitMin: crowdRetryWaitMin, WaitMax: crowdRetryWaitMax}
}

// shouldRetry is DefaultRetryPolicy: never once the context is done; every
// transport error (the peer's cleartext URLs cannot hit the TLS,
// redirect or scheme errors it exempts); 429; 5xx except 501; and a
// status 0.
func (retryRules) shouldRetry(ctx context.Context, status int, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		return true
	}
	return status == http.StatusTooManyRequests || status == 0 ||
		(status >= 500 && status != http.StatusNotImplemented)
}

// backoff is DefaultBackoff for retry number attempt (0 for the first
// retry): a 429 or 503 with a usable Retry-After waits exactly that long
// (not capped by WaitMax, as in retryablehttp); anything else waits
// WaitMin × 2^attempt, at most WaitMax.
func (r retryRules) backoff(attempt, status int, retryAfter string) time.Duration {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(retryAfter, time.Now()); ok {
			return d
		}
	}
	mult := math.Pow(2, float64(attempt)) * float64(r.WaitMin)
	if mult >= float64(r.WaitMax) || math.IsInf(mult, 0) {
		return r.WaitMax
	}
	return time.Duration(mult)
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP
// date. A negative or unreadable value is not usable, and the caller
// falls back to the exponential wait.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(s) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// errGaveUp is what the client returns after Max retries, like
// retryablehttp's "giving up after N attempt(s)".
var errGaveUp = errors.New("giving up")
