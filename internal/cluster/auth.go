package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Calls between nodes are signed with the cluster secret (Config.Secret):
// HMAC-SHA256 over the method, path, cluster, calling node, a timestamp, a
// nonce and the body's SHA-256. A node with a secret refuses any call
// whose signature is missing or wrong, whose timestamp is more than
// MaxClockSkew away from its clock, or whose nonce it has seen, before it
// reads the body, let alone applies it.
const (
	// HeaderNode is the calling node's id and advertised address,
	// "ID/HOST:PORT" (what it claims: signed only with a secret).
	HeaderNode = "Surge-Node"
	// HeaderAuth carries the signature: "v1 t=UNIX_MS,n=NONCE,b=BODY_SHA256,m=MAC",
	// hex except t.
	HeaderAuth = "Surge-Auth"
	// HeaderProbe marks a call that only checks that the receiver shares
	// this node's secret (Join sends one to every member first); the
	// receiver answers it signed, without its engine.
	HeaderProbe = "Surge-Probe"
	// MaxClockSkew is how far a call's timestamp may be from the
	// receiver's clock: the nodes' clocks must agree within it.
	MaxClockSkew = 30 * time.Second
	// MaxNonces bounds the nonces a node remembers (those of the last
	// 2×MaxClockSkew at least); past it calls are refused with 503, which
	// the caller retries, until older ones are forgotten.
	MaxNonces = 1 << 20
	// MinSecretBytes is the shortest cluster secret a node accepts.
	MinSecretBytes = 16
	// refusedLogEvery spaces the log lines about refused calls (one
	// line, then a count of those refused meanwhile), so that a flood of
	// forged calls cannot flood the log.
	refusedLogEvery = 5 * time.Second
	// maxLoggedClaim cuts what a refused caller claims to be in the log.
	maxLoggedClaim = 200

	authVersion = "v1"
	nonceBytes  = 16
)

// CheckSecret tells whether secret may be a cluster secret; empty is "no
// secret" (calls not signed).
func CheckSecret(secret []byte) error {
	if len(secret) > 0 && len(secret) < MinSecretBytes {
		return fmt.Errorf("the cluster secret (SURGE_CLUSTER_SECRET or --cluster-secret-file) has %d bytes; at least %d are needed (MinSecretBytes): make one with `head -c 32 /dev/urandom | base64`", len(secret), MinSecretBytes)
	}
	return nil
}

// authHeader is HeaderAuth's value.
type authHeader struct {
	ts    int64 // Unix milliseconds
	nonce [nonceBytes]byte
	body  [sha256.Size]byte
	mac   [sha256.Size]byte
}

func (h authHeader) String() string {
	return fmt.Sprintf("%s t=%d,n=%x,b=%x,m=%x", authVersion, h.ts, h.nonce, h.body, h.mac)
}

// parseAuthHeader reads HeaderAuth strictly: the version, then t, n, b and
// m in that order, each once.
func parseAuthHeader(s string) (authHeader, error) {
	var h authHeader
	rest, ok := strings.CutPrefix(s, authVersion+" ")
	if !ok {
		return h, fmt.Errorf("%s does not start with %q", HeaderAuth, authVersion+" ")
	}
	fields := strings.Split(rest, ",")
	if len(fields) != 4 {
		return h, fmt.Errorf("%s has %d fields, want t, n, b and m", HeaderAuth, len(fields))
	}
	var err error
	if h.ts, err = strconv.ParseInt(strings.TrimPrefix(fields[0], "t="), 10, 64); err != nil || !strings.HasPrefix(fields[0], "t=") {
		return h, fmt.Errorf("%s: bad timestamp %q", HeaderAuth, fields[0])
	}
	for i, f := range []struct {
		key string
		dst []byte
	}{{"n=", h.nonce[:]}, {"b=", h.body[:]}, {"m=", h.mac[:]}} {
		if err := readHex(fields[i+1], f.key, f.dst); err != nil {
			return h, err
		}
	}
	return h, nil
}

func readHex(field, key string, dst []byte) error {
	v, ok := strings.CutPrefix(field, key)
	if !ok || len(v) != 2*len(dst) {
		return fmt.Errorf("%s: bad field %q (want %s and %d hex digits)", HeaderAuth, field, key, 2*len(dst))
	}
	if _, err := hex.Decode(dst, []byte(v)); err != nil {
		return fmt.Errorf("%s: field %q: %v", HeaderAuth, key, err)
	}
	return nil
}

// callMAC is the signature of one call. Each part is length-prefixed, so
// no two different calls sign the same bytes.
func callMAC(key []byte, method, path, cluster, node, probe string, h *authHeader) [sha256.Size]byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	for _, s := range []string{"surge-cluster-call-" + authVersion, method, path, cluster, node, probe} {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		m.Write(n[:])
		m.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(n[:], uint64(h.ts))
	m.Write(n[:])
	m.Write(h.nonce[:])
	m.Write(h.body[:])
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

// probeAnswerMAC is how a receiver proves to a probing node that it holds
// the same secret: a MAC over the probe's nonce and its own name.
func probeAnswerMAC(key []byte, nonce [nonceBytes]byte, node string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("surge-cluster-probe-answer-" + authVersion + "\x00"))
	m.Write(nonce[:])
	m.Write([]byte(node))
	return hex.EncodeToString(m.Sum(nil))
}

// sign sets the node and signature headers of req, whose body is body.
func sign(req *http.Request, key []byte, cluster, node string, body []byte, now time.Time) (authHeader, error) {
	req.Header.Set(HeaderNode, node)
	h := authHeader{ts: now.UnixMilli()}
	if len(key) == 0 {
		return h, nil
	}
	h.body = sha256.Sum256(body)
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return h, err
	}
	h.mac = callMAC(key, req.Method, req.URL.Path, cluster, node, req.Header.Get(HeaderProbe), &h)
	req.Header.Set(HeaderAuth, h.String())
	return h, nil
}

// refusal is why a call was refused, and the status that says so.
type refusal struct {
	status int
	reason string
}

func (r *refusal) Error() string { return r.reason }

func unauthorized(format string, args ...any) *refusal {
	return &refusal{http.StatusUnauthorized, fmt.Sprintf(format, args...)}
}

// verifier checks the signatures of incoming calls and remembers their
// nonces.
type verifier struct {
	key []byte
	now func() time.Time

	mu        sync.Mutex
	cur, prev map[[nonceBytes]byte]struct{}
	rotated   time.Time
}

func newVerifier(key []byte) *verifier {
	return &verifier{key: key, now: time.Now, cur: map[[nonceBytes]byte]struct{}{}, prev: map[[nonceBytes]byte]struct{}{}}
}

// check verifies r's signature headers for a call to cluster. It reads
// nothing of the body: the signature covers its hash, which the caller
// compares once it has read it.
func (v *verifier) check(r *http.Request, cluster string) (authHeader, error) {
	raw := r.Header.Get(HeaderAuth)
	if raw == "" {
		return authHeader{}, unauthorized("no %s header: this node requires calls signed with the cluster secret", HeaderAuth)
	}
	h, err := parseAuthHeader(raw)
	if err != nil {
		return h, unauthorized("%v", err)
	}
	now := v.now()
	if skew := now.Sub(time.UnixMilli(h.ts)); skew > MaxClockSkew || skew < -MaxClockSkew {
		return h, unauthorized("timestamp %s is %v from this node's clock; at most %v is accepted (MaxClockSkew)", time.UnixMilli(h.ts).UTC().Format(time.RFC3339Nano), skew.Round(time.Millisecond), MaxClockSkew)
	}
	want := callMAC(v.key, r.Method, r.URL.Path, r.Header.Get(HeaderCluster), r.Header.Get(HeaderNode), r.Header.Get(HeaderProbe), &h)
	if !hmac.Equal(want[:], h.mac[:]) {
		return h, unauthorized("wrong signature: the caller's cluster secret differs from this node's")
	}
	return h, v.remember(h.nonce, now)
}

// remember records nonce, refusing one already seen. Nonces live in two
// generations swapped every 2×MaxClockSkew, so each is kept at least that
// long: as long as a call carrying it could pass the timestamp check.
func (v *verifier) remember(nonce [nonceBytes]byte, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now.Sub(v.rotated) >= 2*MaxClockSkew {
		v.prev, v.cur, v.rotated = v.cur, make(map[[nonceBytes]byte]struct{}, len(v.cur)), now
	}
	_, seen := v.cur[nonce]
	if _, old := v.prev[nonce]; seen || old {
		return unauthorized("nonce %x was used before: a replayed call", nonce)
	}
	if len(v.cur)+len(v.prev) >= MaxNonces {
		return &refusal{http.StatusServiceUnavailable, fmt.Sprintf("this node remembers %d nonces of recent calls (MaxNonces); retry", MaxNonces)}
	}
	v.cur[nonce] = struct{}{}
	return nil
}

// rateLog writes at most one line per refusedLogEvery, counting the
// lines it dropped meanwhile.
type rateLog struct {
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *rateLog) warn(log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < refusedLogEvery {
		l.dropped++
		l.mu.Unlock()
		return
	}
	dropped := l.dropped
	l.last, l.dropped = now, 0
	l.mu.Unlock()
	log.Warn(msg, append(args, "similar_lines_dropped", dropped)...)
}

// claim is what a caller says it is, cut short for the log (whose
// handler escapes it).
func claim(s string) string {
	if len(s) > maxLoggedClaim {
		s = s[:maxLoggedClaim] + "..."
	}
	return s
}

var errProbeUnsigned = errors.New("it answered without proving that it holds the cluster secret: it runs with none")
