// Package strictfs is a deterministic in-memory vfs.FS that forgets what
// was not synced. A crash test that kills the process with SIGKILL never
// sees a missing fsync, because the page cache survives; Restart simulates
// a power loss instead, so a log or snapshot that forgets File.Sync or
// SyncDir loses data in the test, as it would on a real machine.
//
// It follows Pebble's vfs.NewCrashableMem and CrashClone, but every random
// decision is drawn in a fixed order (names sorted, pages in order), so a
// seed replays a failure exactly.
package strictfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"

	"github.com/surge-run/surge/internal/vfs"
)

var _ vfs.FS = (*FS)(nil)

// ErrCrashed is wrapped by every error returned after the FS has crashed.
var ErrCrashed = errors.New("strictfs: the file system has crashed")

// pageSize is the unit in which unsynced data survives a power loss: the
// kernel writes back dirty pages independently and in no particular order.
const pageSize = 4096

var (
	errIsDir    = errors.New("is a directory")
	errNotDir   = errors.New("not a directory")
	errReadOnly = errors.New("file opened read-only")
	errNegative = errors.New("negative offset")
)

// OpKind is the kind of a mutating operation. The zero value is no
// operation: Crashed reports it after Crash, which hit no operation.
type OpKind uint8

const (
	OpCreate OpKind = iota + 1
	OpWrite
	OpSync
	OpRename
	OpRemove
	OpSyncDir
	OpMkdir
)

var opNames = [...]string{"none", "create", "write", "sync", "rename", "remove", "syncdir", "mkdir"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", k)
}

// Op is a mutating operation, as passed to the hook and reported by
// Crashed. Path is cleaned; for OpRename it is the new name. Off and Len
// are set for OpWrite only.
type Op struct {
	Kind OpKind
	Path string
	Off  int64
	Len  int
}

// FS is the in-memory file system. It is safe for concurrent use.
type FS struct {
	mu   sync.Mutex
	dirs map[string]*dir // by cleaned path; directories are always durable

	ops      int64
	crashAt  int64
	crashRng *rand.Rand
	crashed  bool
	crashOp  Op
	hook     func(Op)
}

// dir holds the entries a program sees (cur) and those that would be found
// after a power loss (synced): they differ until SyncDir.
type dir struct {
	cur, synced map[string]*node
}

// node is an inode. Nothing in this FS shortens a file, so len(data) >=
// len(synced) always holds.
type node struct {
	data, synced []byte
}

// New returns an empty FS holding only the directories "." and "/", so
// that relative and absolute names both work.
func New() *FS {
	return &FS{dirs: map[string]*dir{".": newDir(), "/": newDir()}}
}

func newDir() *dir {
	return &dir{cur: map[string]*node{}, synced: map[string]*node{}}
}

// Ops returns how many mutating operations have started so far. Every
// call of a mutating method counts, even one that fails with an ordinary
// error, so that crash points do not depend on which calls succeed; none
// counts once the FS has crashed.
func (f *FS) Ops() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// CrashAt arms a crash at the n-th mutating operation since New (n ==
// Ops()+1 is the next one). That operation is not applied, except that a
// write applies a prefix of its bytes whose length rng draws uniformly
// from [0, len] (none if rng is nil). From then on every operation fails
// with ErrCrashed. n == 0 or n <= Ops() disarms.
func (f *FS) CrashAt(n int64, rng *rand.Rand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= f.ops {
		n, rng = 0, nil
	}
	f.crashAt, f.crashRng = n, rng
}

// Crash crashes the FS now, before the next operation. Crashed then
// reports the zero Op. It does nothing if the FS has already crashed.
func (f *FS) Crash() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.crashed {
		f.crash(Op{})
	}
}

// Crashed reports whether the FS has crashed and the operation that
// crashed it. Ops() is then that operation's number.
func (f *FS) Crashed() (Op, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashOp, f.crashed
}

// SetHook installs fn, called just before each mutating operation is
// counted and applied; nil removes it. fn runs without the FS lock, so it
// may call the FS (to arm a crash at the operation it is shown, say).
// It is not called once the FS has crashed.
func (f *FS) SetHook(fn func(Op)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hook = fn
}

func (f *FS) crash(op Op) error {
	f.crashed, f.crashOp = true, op
	f.crashAt, f.crashRng = 0, nil
	return crashErr(op.Kind.String(), op.Path)
}

func crashErr(op, path string) error {
	return &fs.PathError{Op: op, Path: path, Err: ErrCrashed}
}

// start begins a mutating operation: it calls the hook, counts op and
// fires an armed crash, calling tear (if not nil) with the crash's rng so
// that a write can apply part of itself first. It always returns with f.mu
// held; a non-nil error means op must not be applied.
func (f *FS) start(op Op, tear func(*rand.Rand)) error {
	f.mu.Lock()
	if f.crashed {
		return crashErr(op.Kind.String(), op.Path)
	}
	if hook := f.hook; hook != nil {
		f.mu.Unlock()
		hook(op)
		f.mu.Lock()
		if f.crashed { // another goroutine crashed it meanwhile
			return crashErr(op.Kind.String(), op.Path)
		}
	}
	f.ops++
	if f.ops != f.crashAt {
		return nil
	}
	if tear != nil {
		tear(f.crashRng)
	}
	return f.crash(op)
}

// check begins an operation that changes nothing: it only fails once the
// FS has crashed. It returns with f.mu held.
func (f *FS) check(op, path string) error {
	f.mu.Lock()
	if f.crashed {
		return crashErr(op, path)
	}
	return nil
}

// entry finds the directory that holds the file name (cleaned) and the
// name within it.
func (f *FS) entry(op, name string) (*dir, string, error) {
	if f.dirs[name] != nil {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: errIsDir}
	}
	d := f.dirs[filepath.Dir(name)]
	if d == nil {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return d, filepath.Base(name), nil
}

// Create binds name to a new, empty file. A handle already open on the
// old file keeps the old contents, as with a new inode.
func (f *FS) Create(name string) (vfs.File, error) {
	name = filepath.Clean(name)
	err := f.start(Op{Kind: OpCreate, Path: name}, nil)
	defer f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	d, base, err := f.entry("create", name)
	if err != nil {
		return nil, err
	}
	n := &node{}
	d.cur[base] = n
	return &file{fs: f, n: n, name: name, writable: true}, nil
}

func (f *FS) Open(name string) (vfs.File, error)      { return f.open("open", name, false) }
func (f *FS) OpenWrite(name string) (vfs.File, error) { return f.open("openwrite", name, true) }

func (f *FS) open(op, name string, writable bool) (vfs.File, error) {
	name = filepath.Clean(name)
	err := f.check(op, name)
	defer f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	n, err := f.lookup(op, name)
	if err != nil {
		return nil, err
	}
	return &file{fs: f, n: n, name: name, writable: writable}, nil
}

func (f *FS) lookup(op, name string) (*node, error) {
	d, base, err := f.entry(op, name)
	if err != nil {
		return nil, err
	}
	n := d.cur[base]
	if n == nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return n, nil
}

func (f *FS) Rename(oldname, newname string) error {
	oldname, newname = filepath.Clean(oldname), filepath.Clean(newname)
	err := f.start(Op{Kind: OpRename, Path: newname}, nil)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	od, obase, err := f.entry("rename", oldname)
	if err != nil {
		return err
	}
	n := od.cur[obase]
	if n == nil {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	nd, nbase, err := f.entry("rename", newname)
	if err != nil {
		return err
	}
	// POSIX: renaming a name onto another link of the same file does
	// nothing. Restart can leave such pairs behind (a half-kept rename).
	if nd.cur[nbase] == n {
		return nil
	}
	delete(od.cur, obase)
	nd.cur[nbase] = n
	return nil
}

func (f *FS) Remove(name string) error {
	name = filepath.Clean(name)
	err := f.start(Op{Kind: OpRemove, Path: name}, nil)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	d, base, err := f.entry("remove", name)
	if err != nil {
		return err
	}
	if d.cur[base] == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(d.cur, base)
	return nil
}

// MkdirAll creates dir and its missing parents. Directories are durable
// at once: the log and snapshots create theirs once, and modelling their
// loss would test MkdirAll rather than the code under test.
func (f *FS) MkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	err := f.start(Op{Kind: OpMkdir, Path: dir}, nil)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	var missing []string
	for d := dir; f.dirs[d] == nil; d = filepath.Dir(d) {
		// The loop ends: "." and "/" always exist.
		if p := f.dirs[filepath.Dir(d)]; p != nil && p.cur[filepath.Base(d)] != nil {
			return &fs.PathError{Op: "mkdir", Path: d, Err: errNotDir}
		}
		missing = append(missing, d)
	}
	for _, d := range missing {
		f.dirs[d] = newDir()
	}
	return nil
}

func (f *FS) List(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	err := f.check("list", dir)
	defer f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	d := f.dirs[dir]
	if d == nil {
		if _, err := f.lookup("list", dir); err == nil {
			return nil, &fs.PathError{Op: "list", Path: dir, Err: errNotDir}
		}
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fs.ErrNotExist}
	}
	return slices.Sorted(maps.Keys(d.cur)), nil
}

func (f *FS) SyncDir(dir string) error {
	dir = filepath.Clean(dir)
	err := f.start(Op{Kind: OpSyncDir, Path: dir}, nil)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	d := f.dirs[dir]
	if d == nil {
		return &fs.PathError{Op: "syncdir", Path: dir, Err: fs.ErrNotExist}
	}
	d.synced = maps.Clone(d.cur)
	return nil
}

// ReadFile returns the current contents of name. It is a test helper: it
// is not an operation and works on a crashed FS too, so a test can look
// at what a torn write left.
func (f *FS) ReadFile(name string) ([]byte, error) {
	name = filepath.Clean(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.lookup("readfile", name)
	if err != nil {
		return nil, err
	}
	return slices.Clone(n.data), nil
}

// WriteFile sets the contents of name, creating it if needed, as if they
// and the entry had been synced long ago. It is a test helper to corrupt
// files: not an operation, it ignores crashes. Handles open on name see
// the new contents.
func (f *FS) WriteFile(name string, data []byte) error {
	name = filepath.Clean(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	d, base, err := f.entry("writefile", name)
	if err != nil {
		return err
	}
	n := d.cur[base]
	if n == nil {
		n = &node{}
		d.cur[base] = n
	}
	d.synced[base] = n
	n.data, n.synced = slices.Clone(data), slices.Clone(data)
	return nil
}

// Restart returns a new FS holding what a machine would find on disk after
// losing power now (or at the crash). Synced data and entries survive;
// each unsynced page and each unsynced directory entry survives with
// probability keepPercent/100, drawn from rng in a fixed order. rng may be
// nil when keepPercent is <= 0 or >= 100: nothing is drawn then. f is not
// changed, so one crash can be restarted with many seeds.
func (f *FS) Restart(rng *rand.Rand, keepPercent int) *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := func() bool {
		switch {
		case keepPercent <= 0:
			return false
		case keepPercent >= 100:
			return true
		}
		return rng.IntN(100) < keepPercent
	}
	g := New()
	// A node reachable under two names (a rename whose new entry was kept
	// while the old one was not removed) must stay one node, as one inode.
	clones := map[*node]*node{}
	for _, path := range slices.Sorted(maps.Keys(f.dirs)) {
		d, gd := f.dirs[path], newDir()
		g.dirs[path] = gd
		names := slices.Concat(slices.Collect(maps.Keys(d.cur)), slices.Collect(maps.Keys(d.synced)))
		slices.Sort(names)
		for _, name := range slices.Compact(names) {
			n := d.synced[name]
			if cur := d.cur[name]; cur != n && keep() {
				n = cur
			}
			if n == nil {
				continue
			}
			c := clones[n]
			if c == nil {
				c = n.restart(keep)
				clones[n] = c
			}
			gd.cur[name], gd.synced[name] = c, c
		}
	}
	return g
}

// restart returns n as found after a power loss: the synced bytes, with
// each page that differs from them overwritten by its current contents if
// keep says so. A kept page past the synced end leaves zeros before it
// where earlier pages were not kept: the torn write a log must detect.
func (n *node) restart(keep func() bool) *node {
	out := slices.Clone(n.synced)
	for lo := 0; lo < len(n.data); lo += pageSize {
		hi := min(lo+pageSize, len(n.data))
		if hi <= len(n.synced) && bytes.Equal(n.data[lo:hi], n.synced[lo:hi]) {
			continue
		}
		if !keep() {
			continue
		}
		if len(out) < hi {
			out = append(out, make([]byte, hi-len(out))...)
		}
		copy(out[lo:hi], n.data[lo:hi])
	}
	return &node{data: out, synced: slices.Clone(out)}
}

// file is an open handle. It keeps its node across Rename and Remove, as a
// POSIX file descriptor keeps its inode.
type file struct {
	fs       *FS
	n        *node
	name     string
	writable bool
	closed   bool // guarded by fs.mu
}

// usable reports why h cannot be used, with fs.mu held. A crash is
// reported before a close so that every call fails with ErrCrashed after
// a crash.
func (h *file) usable(op string) error {
	if h.fs.crashed {
		return crashErr(op, h.name)
	}
	if h.closed {
		return &fs.PathError{Op: op, Path: h.name, Err: fs.ErrClosed}
	}
	return nil
}

func (h *file) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.usable("read"); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: h.name, Err: errNegative}
	}
	n := 0
	if off < int64(len(h.n.data)) {
		n = copy(p, h.n.data[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *file) WriteAt(p []byte, off int64) (int, error) {
	err := h.fs.start(Op{Kind: OpWrite, Path: h.name, Off: off, Len: len(p)}, func(rng *rand.Rand) {
		if rng != nil && h.usable("write") == nil && h.writable && off >= 0 {
			h.n.write(p[:rng.IntN(len(p)+1)], off)
		}
	})
	defer h.fs.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := h.usable("write"); err != nil {
		return 0, err
	}
	if !h.writable {
		return 0, &fs.PathError{Op: "write", Path: h.name, Err: errReadOnly}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "write", Path: h.name, Err: errNegative}
	}
	h.n.write(p, off)
	return len(p), nil
}

func (n *node) write(p []byte, off int64) {
	if end := int(off) + len(p); end > len(n.data) {
		n.data = append(n.data, make([]byte, end-len(n.data))...)
	}
	copy(n.data[off:], p)
}

// Sync works on read-only handles too, as fsync does on Linux.
func (h *file) Sync() error {
	err := h.fs.start(Op{Kind: OpSync, Path: h.name}, nil)
	defer h.fs.mu.Unlock()
	if err != nil {
		return err
	}
	if err := h.usable("sync"); err != nil {
		return err
	}
	h.n.synced = slices.Clone(h.n.data)
	return nil
}

func (h *file) Size() (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.usable("size"); err != nil {
		return 0, err
	}
	return int64(len(h.n.data)), nil
}

func (h *file) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.usable("close"); err != nil {
		return err
	}
	h.closed = true
	return nil
}
