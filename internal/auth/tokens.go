package auth

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"
)

const (
	// TokenPrefix starts every token `surge token new` makes, so a leaked
	// one is recognisable (secret scanners, logs).
	TokenPrefix = "surge_"
	// tokenBytes is the randomness of a token: 256 bits make guessing
	// hopeless, so one SHA-256 protects the stored form (no password KDF).
	tokenBytes = 32
	// MinTokenLen is the shortest token accepted from SURGE_ADMIN_TOKEN:
	// shorter is too guessable for a single unsalted hash.
	MinTokenLen = 32
	// MaxTokensFileBytes bounds the tokens file read at start.
	MaxTokensFileBytes = 1 << 20
	// maxNameLen bounds a token's name, which logs and errors show.
	maxNameLen = 64
	// BootstrapName names the token from SURGE_ADMIN_TOKEN in logs.
	BootstrapName = "bootstrap-admin"
	hashPrefix    = "sha256:"
)

// NewToken returns a fresh random token.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash is the stored form of a token.
func Hash(token string) [sha256.Size]byte {
	// The token is only read: hashing the string's bytes in place saves
	// the copy (and its allocation) on every request.
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(token), len(token)))
}

// Entry is one line of a tokens file.
type Entry struct {
	Name   string
	Scopes []Scope
	Hash   [sha256.Size]byte
}

// Line is e as a tokens file holds it.
func (e Entry) Line() string {
	s := make([]string, len(e.Scopes))
	for i, sc := range e.Scopes {
		s[i] = sc.String()
	}
	return e.Name + " " + strings.Join(s, ",") + " " + hashPrefix + hex.EncodeToString(e.Hash[:])
}

// ParseFile reads a tokens file: one token a line,
// "<name> <scope>[,<scope>...] sha256:<hex>", "#" to the end of a line a
// comment. Names and hashes must be unique. An error names the line.
func ParseFile(r io.Reader) ([]Entry, error) {
	lr := &io.LimitedReader{R: r, N: MaxTokensFileBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 4096), MaxTokensFileBytes)
	var out []Entry
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := parseLine(line)
		if err == nil && names[e.Name] {
			err = fmt.Errorf("name %q is used twice", e.Name)
		}
		if err == nil && hashes[e.Hash] {
			err = errors.New("this hash is on an earlier line too (the same token twice)")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		names[e.Name], hashes[e.Hash] = true, true
		out = append(out, e)
	}
	if lr.N <= 0 {
		return nil, fmt.Errorf("the tokens file is larger than %d bytes", MaxTokensFileBytes)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

var errBadHash = errors.New("the hash must be sha256: and 64 hex digits (`surge token new` prints the line)")

func parseLine(line string) (Entry, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return Entry{}, fmt.Errorf("want <name> <scope>[,<scope>...] sha256:<hex>, got %d fields", len(f))
	}
	if err := checkName(f[0]); err != nil {
		return Entry{}, err
	}
	scopes, err := ParseScopes(f[1])
	if err != nil {
		return Entry{}, err
	}
	hexHash, ok := strings.CutPrefix(f[2], hashPrefix)
	var h [sha256.Size]byte
	// The length first: hex.Decode writes past a short destination.
	if !ok || len(hexHash) != 2*sha256.Size {
		return Entry{}, errBadHash
	}
	if _, err := hex.Decode(h[:], []byte(hexHash)); err != nil {
		return Entry{}, errBadHash
	}
	return Entry{Name: f[0], Scopes: scopes, Hash: h}, nil
}

func checkName(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("name longer than %d bytes", maxNameLen)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("name %q: use letters, digits, '-', '_' and '.' only", name)
		}
	}
	return nil
}

// Principal is who a valid token speaks for.
type Principal struct {
	Name   string
	Scopes []Scope
	hash   [sha256.Size]byte
	// open counts the token's streams and waiting calls open now.
	open atomic.Int64
}

// Allows reports whether p's scopes grant n.
func (p *Principal) Allows(n Need) bool {
	if n.Open {
		return true
	}
	for _, s := range p.Scopes {
		if s.grants(n) {
			return true
		}
	}
	return false
}

// Table finds the principal of a token. It is read-only once built.
type Table struct {
	byHash map[[sha256.Size]byte]*Principal
}

// NewTable builds a table from a tokens file's entries and, if not
// empty, the bootstrap admin token (scope *:admin).
func NewTable(entries []Entry, bootstrap string) (*Table, error) {
	t := &Table{byHash: map[[sha256.Size]byte]*Principal{}}
	for _, e := range entries {
		t.byHash[e.Hash] = &Principal{Name: e.Name, Scopes: e.Scopes, hash: e.Hash}
	}
	if bootstrap == "" {
		return t, nil
	}
	if len(bootstrap) < MinTokenLen {
		return nil, fmt.Errorf("SURGE_ADMIN_TOKEN is %d characters; use at least %d random ones (`surge token new` makes one)", len(bootstrap), MinTokenLen)
	}
	h := Hash(bootstrap)
	if p, dup := t.byHash[h]; dup {
		return nil, fmt.Errorf("SURGE_ADMIN_TOKEN is also the tokens file's %q: give it one place", p.Name)
	}
	t.byHash[h] = &Principal{Name: BootstrapName, Scopes: []Scope{{Workload: AllWorkloads, Role: Admin}}, hash: h}
	return t, nil
}

// carry takes over old's principal for every token t keeps with the same
// name and scopes, with the count of what it holds open.
func (t *Table) carry(old *Table) {
	if old == nil {
		return
	}
	for h, p := range t.byHash {
		if q := old.byHash[h]; q != nil && q.Name == p.Name && slices.Equal(q.Scopes, p.Scopes) {
			t.byHash[h] = q
		}
	}
}

// Names are the tokens' names, sorted: what logs may show of them.
func (t *Table) Names() []string {
	var out []string
	for _, p := range t.byHash {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// Len is the number of tokens.
func (t *Table) Len() int { return len(t.byHash) }

// Lookup returns the principal of token, or nil. The map is keyed by the
// token's hash, so its timing tells nothing about the token; the final
// comparison is in constant time all the same.
func (t *Table) Lookup(token string) *Principal {
	if token == "" {
		return nil
	}
	h := Hash(token)
	p := t.byHash[h]
	if p == nil || subtle.ConstantTimeCompare(p.hash[:], h[:]) != 1 {
		return nil
	}
	return p
}
