package strictfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/vfs"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func ok(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// put creates name with data; syncData and syncDir say what is made durable.
func put(t testing.TB, f *FS, name string, data []byte, syncData, syncDir bool) vfs.File {
	t.Helper()
	h, err := f.Create(name)
	ok(t, err)
	_, err = h.WriteAt(data, 0)
	ok(t, err)
	if syncData {
		ok(t, h.Sync())
	}
	if syncDir {
		ok(t, f.SyncDir(dirOf(name)))
	}
	return h
}

func dirOf(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return "."
}

func content(t testing.TB, f *FS, name string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(f, name)
	ok(t, err)
	return b
}

func missing(t testing.TB, f *FS, name string) {
	t.Helper()
	if _, err := f.Open(name); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(%q) = %v, want fs.ErrNotExist", name, err)
	}
}

// dump renders everything a restart can depend on: directories, current
// and synced entries, which names share a node, and both contents.
func dump(f *FS) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	ids := map[*node]int{}
	id := func(n *node) int {
		if n == nil {
			return -1
		}
		if _, ok := ids[n]; !ok {
			ids[n] = len(ids)
		}
		return ids[n]
	}
	for _, path := range slices.Sorted(maps.Keys(f.dirs)) {
		d := f.dirs[path]
		fmt.Fprintf(&b, "dir %s\n", path)
		for _, name := range slices.Sorted(maps.Keys(d.cur)) {
			n := d.cur[name]
			fmt.Fprintf(&b, " cur %s #%d data=%x synced=%x\n", name, id(n), n.data, n.synced)
		}
		for _, name := range slices.Sorted(maps.Keys(d.synced)) {
			fmt.Fprintf(&b, " synced %s #%d\n", name, id(d.synced[name]))
		}
	}
	return b.String()
}

func TestUnsyncedWriteLost(t *testing.T) {
	f := New()
	h := put(t, f, "wal", nil, true, true)
	_, err := h.WriteAt([]byte("unsynced"), 0)
	ok(t, err)
	if got := content(t, f.Restart(nil, 0), "wal"); len(got) != 0 {
		t.Fatalf("after restart wal = %q, want empty", got)
	}
	if got := content(t, f, "wal"); string(got) != "unsynced" {
		t.Fatalf("Restart changed the FS it was called on: wal = %q", got)
	}
}

func TestSyncedDataSurvives(t *testing.T) {
	f := New()
	ok(t, f.MkdirAll("/data/log"))
	synced := bytes.Repeat([]byte("s"), 3*pageSize+10)
	h := put(t, f, "/data/log/wal", synced, true, true)
	// Overwrite a synced page and append, neither synced.
	_, err := h.WriteAt([]byte("XX"), pageSize)
	ok(t, err)
	_, err = h.WriteAt([]byte("tail"), int64(len(synced)))
	ok(t, err)
	if got := content(t, f.Restart(nil, 0), "/data/log/wal"); !bytes.Equal(got, synced) {
		t.Fatalf("after restart wal has %d bytes, want the %d synced ones", len(got), len(synced))
	}
}

func TestUnsyncedEntryLost(t *testing.T) {
	f := New()
	put(t, f, "snap", []byte("data"), true, false) // file synced, directory not
	g := f.Restart(nil, 0)
	missing(t, g, "snap")
	if names, err := g.List("."); err != nil || len(names) != 0 {
		t.Fatalf("List = %q, %v; want nothing", names, err)
	}
}

func TestRenameNeedsSyncDir(t *testing.T) {
	f := New()
	put(t, f, "snap.tmp", []byte("new"), true, true)
	ok(t, f.Rename("snap.tmp", "snap"))
	g := f.Restart(nil, 0)
	missing(t, g, "snap")
	if got := content(t, g, "snap.tmp"); string(got) != "new" {
		t.Fatalf("snap.tmp = %q, want %q", got, "new")
	}
	ok(t, f.SyncDir("."))
	g = f.Restart(nil, 0)
	missing(t, g, "snap.tmp")
	if got := content(t, g, "snap"); string(got) != "new" {
		t.Fatalf("snap = %q, want %q", got, "new")
	}
}

// A rename across directories with only the target synced leaves the file
// under both names, and they must stay one file.
func TestHalfKeptRenameSharesNode(t *testing.T) {
	f := New()
	ok(t, f.MkdirAll("a"))
	ok(t, f.MkdirAll("b"))
	put(t, f, "a/x", []byte("x"), true, true)
	ok(t, f.Rename("a/x", "b/x"))
	ok(t, f.SyncDir("b"))
	g := f.Restart(nil, 0)
	h, err := g.OpenWrite("a/x")
	ok(t, err)
	_, err = h.WriteAt([]byte("y"), 0)
	ok(t, err)
	if got := content(t, g, "b/x"); string(got) != "y" {
		t.Fatalf("b/x = %q after writing a/x, want the same file", got)
	}
	// POSIX: renaming onto another link of the same file does nothing.
	ok(t, g.Rename("a/x", "b/x"))
	content(t, g, "a/x")
}

func TestRemoveNeedsSyncDir(t *testing.T) {
	f := New()
	put(t, f, "old", []byte("old"), true, true)
	ok(t, f.Remove("old"))
	missing(t, f, "old")
	if got := content(t, f.Restart(nil, 0), "old"); string(got) != "old" {
		t.Fatalf("old = %q after restart, want it back", got)
	}
	ok(t, f.SyncDir("."))
	missing(t, f.Restart(nil, 0), "old")
}

// history drives f through a random but seed-determined mix of every
// operation over several directories, leaving much unsynced.
func history(t testing.TB, seed uint64) *FS {
	f := New()
	rng := seeded(seed)
	dirs := []string{".", "a", "a/b", "c"}
	for _, d := range dirs {
		ok(t, f.MkdirAll(d))
	}
	names := func() string {
		return fmt.Sprintf("%s/f%d", dirs[rng.IntN(len(dirs))], rng.IntN(4))
	}
	open := map[string]vfs.File{}
	for range 300 {
		name := names()
		switch r := rng.IntN(20); {
		case r < 2:
			h, err := f.Create(name)
			ok(t, err)
			open[name] = h
		case r < 12:
			h := open[name]
			if h == nil {
				continue
			}
			b := make([]byte, rng.IntN(2*pageSize))
			for i := range b {
				b[i] = byte(1 + rng.IntN(255)) // never zero, so lost pages show
			}
			_, err := h.WriteAt(b, int64(rng.IntN(4*pageSize)))
			ok(t, err)
		case r < 15:
			if h := open[name]; h != nil {
				ok(t, h.Sync())
			}
		case r < 17:
			ok(t, f.SyncDir(dirs[rng.IntN(len(dirs))]))
		case r < 19:
			to := names()
			if f.Rename(name, to) == nil {
				open[to] = open[name]
				delete(open, name)
			}
		default:
			f.Remove(name)
		}
	}
	return f
}

func TestKeep100IsCurrent(t *testing.T) {
	for seed := range uint64(10) {
		f := history(t, seed)
		cur := f.Restart(nil, 100)
		f.mu.Lock()
		for path, d := range f.dirs {
			for name, n := range d.cur {
				got := cur.dirs[path].cur[name]
				if got == nil || !bytes.Equal(got.data, n.data) {
					t.Fatalf("seed %d: %s/%s differs after Restart(100)", seed, path, name)
				}
			}
			if len(cur.dirs[path].cur) != len(d.cur) {
				t.Fatalf("seed %d: %s has other names after Restart(100)", seed, path)
			}
		}
		f.mu.Unlock()
		// Everything in a restarted FS is synced.
		if a, b := dump(cur), dump(cur.Restart(nil, 0)); a != b {
			t.Fatalf("seed %d: a restarted FS loses data on a second restart", seed)
		}
	}
}

func TestRestartDeterministic(t *testing.T) {
	want := dump(history(t, 1).Restart(seeded(7), 50))
	for run := range 50 {
		if got := dump(history(t, 1).Restart(seeded(7), 50)); got != want {
			t.Fatalf("run %d: same history and seed gave a different restart", run)
		}
	}
	// And the seed matters: otherwise the test above proves little.
	f := history(t, 1)
	if dump(f.Restart(seeded(8), 50)) == want {
		t.Fatal("seeds 7 and 8 gave the same restart")
	}
	for _, keep := range []int{0, 100} {
		if dump(f.Restart(nil, keep)) == want {
			t.Fatalf("keep 50 gave the same restart as keep %d", keep)
		}
	}
}

// Every file after a restart is, page by page, its synced or its current
// contents, under a name that had it as synced or current entry.
func TestRestartPagesFromEitherState(t *testing.T) {
	for seed := range uint64(20) {
		f := history(t, seed)
		g := f.Restart(seeded(seed), 50)
		for path, gd := range g.dirs {
			d := f.dirs[path]
			for name, r := range gd.cur {
				if !pagewise(r.data, d.synced[name]) && !pagewise(r.data, d.cur[name]) {
					t.Fatalf("seed %d: %s/%s is neither state page by page", seed, path, name)
				}
			}
		}
	}
}

func pagewise(r []byte, n *node) bool {
	if n == nil || len(r) < len(n.synced) || len(r) > len(n.data) {
		return false
	}
	if len(r) != len(n.synced) && len(r) != len(n.data) && len(r)%pageSize != 0 {
		return false
	}
	synced := append(slices.Clone(n.synced), make([]byte, len(r)-len(n.synced))...)
	for lo := 0; lo < len(r); lo += pageSize {
		hi := min(lo+pageSize, len(r))
		if !bytes.Equal(r[lo:hi], synced[lo:hi]) && !bytes.Equal(r[lo:hi], n.data[lo:hi]) {
			return false
		}
	}
	return true
}

func TestTornPage(t *testing.T) {
	f := New()
	h := put(t, f, "wal", nil, true, true)
	page := bytes.Repeat([]byte{0xAB}, pageSize)
	_, err := h.WriteAt(slices.Concat(page, page, page), 0)
	ok(t, err)
	for seed := range uint64(200) {
		got := content(t, f.Restart(seeded(seed), 50), "wal")
		if len(got) == 3*pageSize && bytes.Equal(got[pageSize:2*pageSize], make([]byte, pageSize)) &&
			bytes.Equal(got[2*pageSize:], page) {
			return // page 3 persisted, page 2 did not
		}
	}
	t.Fatal("no seed kept a later page while losing an earlier one")
}

func TestCrashAtTearsWrite(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	lengths := map[int]bool{}
	for seed := range uint64(30) {
		f := New()
		h := put(t, f, "wal", nil, false, true)
		f.CrashAt(f.Ops()+1, seeded(seed))
		before := f.Ops()
		if _, err := h.WriteAt(data, 5); !errors.Is(err, ErrCrashed) {
			t.Fatalf("crashing write: err = %v, want ErrCrashed", err)
		}
		if op, crashed := f.Crashed(); !crashed || op != (Op{Kind: OpWrite, Path: "wal", Off: 5, Len: len(data)}) {
			t.Fatalf("Crashed() = %+v, %v", op, crashed)
		}
		got, err := f.ReadFile("wal")
		ok(t, err)
		if n := max(len(got)-5, 0); !bytes.Equal(got, append(make([]byte, min(5, len(got))), data[:n]...)) {
			t.Fatalf("after crash wal = %q, want a prefix of the write", got)
		}
		lengths[len(got)] = true
		everythingFails(t, f, h)
		if f.Ops() != before+1 {
			t.Fatalf("Ops() = %d after crash, want %d", f.Ops(), before+1)
		}
	}
	if len(lengths) < 10 {
		t.Fatalf("30 seeds gave only %d prefix lengths", len(lengths))
	}
}

func everythingFails(t *testing.T, f *FS, h vfs.File) {
	t.Helper()
	buf := make([]byte, 1)
	calls := map[string]error{
		"create":  errOf(f.Create("x")),
		"open":    errOf(f.Open("wal")),
		"owrite":  errOf(f.OpenWrite("wal")),
		"rename":  f.Rename("wal", "y"),
		"remove":  f.Remove("wal"),
		"mkdir":   f.MkdirAll("d"),
		"list":    errOf(f.List(".")),
		"syncdir": f.SyncDir("."),
		"read":    errOf(h.ReadAt(buf, 0)),
		"write":   errOf(h.WriteAt(buf, 0)),
		"sync":    h.Sync(),
		"size":    errOf(h.Size()),
		"close":   h.Close(),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrCrashed) {
			t.Errorf("%s after crash: err = %v, want ErrCrashed", name, err)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

func TestCrashAtOtherOps(t *testing.T) {
	f := New()
	put(t, f, "a", []byte("a"), true, true)
	f.CrashAt(f.Ops()+2, nil)
	ok(t, f.Remove("a")) // not yet
	if err := f.Rename("b", "c"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("rename: err = %v, want ErrCrashed", err)
	}
	if _, err := f.ReadFile("a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the remove before the crash was not applied")
	}

	f = New()
	f.CrashAt(1, nil)
	f.CrashAt(0, nil) // disarms
	ok(t, f.MkdirAll("d"))
	f.CrashAt(1, nil) // in the past: disarms
	ok(t, f.MkdirAll("e"))
	f.Crash()
	if op, crashed := f.Crashed(); !crashed || op != (Op{}) || op.Kind.String() != "none" {
		t.Fatalf("Crashed() = %+v, %v after Crash", op, crashed)
	}
	if _, err := f.Create("d/x"); !errors.Is(err, ErrCrashed) {
		t.Fatalf("create after Crash: err = %v", err)
	}
	if f.Ops() != 2 {
		t.Fatalf("Ops() = %d, want 2", f.Ops())
	}
}

// The point of the package: crashing WriteFileAtomic at every operation,
// whatever survives, leaves the old or the new contents; the same writer
// without the fsync is caught.
func TestCrashEveryOpOfAtomicWrite(t *testing.T) {
	base := New()
	ok(t, base.MkdirAll("d"))
	ok(t, vfs.WriteFileAtomic(base, "d/x", []byte("old")))
	newData := bytes.Repeat([]byte("new"), 3000)

	check := func(write func(vfs.FS) error) (torn bool) {
		clean := base.Restart(nil, 100)
		ok(t, write(clean))
		for n := int64(1); n <= clean.Ops()+1; n++ {
			f := base.Restart(nil, 100)
			f.CrashAt(n, seeded(uint64(n)))
			write(f)
			for seed := range uint64(20) {
				got := content(t, f.Restart(seeded(seed), int(seed*5)), "d/x")
				if string(got) != "old" && !bytes.Equal(got, newData) {
					torn = true
				}
			}
		}
		return torn
	}
	if check(func(f vfs.FS) error { return vfs.WriteFileAtomic(f, "d/x", newData) }) {
		t.Fatal("WriteFileAtomic left a mix of old and new")
	}
	noSync := func(f vfs.FS) error {
		h, err := f.Create("d/x.tmp")
		if err != nil {
			return err
		}
		if _, err := h.WriteAt(newData, 0); err != nil {
			return err
		}
		if err := f.Rename("d/x.tmp", "d/x"); err != nil {
			return err
		}
		return f.SyncDir("d")
	}
	if !check(noSync) {
		t.Fatal("a write without fsync was not caught")
	}
}

func TestHook(t *testing.T) {
	f := New()
	ok(t, f.MkdirAll("d"))
	var ops []Op
	f.SetHook(func(op Op) {
		ops = append(ops, op)
		if op.Kind == OpRename {
			f.CrashAt(f.Ops()+1, nil) // the hook runs unlocked, before counting
		}
	})
	err := vfs.WriteFileAtomic(f, "d/x", []byte("abc"))
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("err = %v, want ErrCrashed at the rename", err)
	}
	want := []Op{{OpCreate, "d/x.tmp", 0, 0}, {OpWrite, "d/x.tmp", 0, 3}, {OpSync, "d/x.tmp", 0, 0}, {OpRename, "d/x", 0, 0}}
	if !slices.Equal(ops, want) {
		t.Fatalf("hook saw %+v, want %+v", ops, want)
	}
	if _, err := f.ReadFile("d/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the crashing rename was applied")
	}
	if got := fmt.Sprint(OpCreate, OpWrite, OpSync, OpRename, OpRemove, OpSyncDir, OpMkdir); got != "create write sync rename remove syncdir mkdir" {
		t.Fatalf("OpKind names: %s", got)
	}
}

func TestHandlesOutliveNames(t *testing.T) {
	f := New()
	h := put(t, f, "a", []byte("one"), false, false)
	r, err := f.Open("a")
	ok(t, err)
	ok(t, f.Rename("a", "b"))
	_, err = h.WriteAt([]byte("two"), 3)
	ok(t, err)
	if got := content(t, f, "b"); string(got) != "onetwo" {
		t.Fatalf("b = %q after writing through the old handle", got)
	}
	ok(t, f.Remove("b"))
	_, err = h.WriteAt([]byte("!"), 6)
	ok(t, err)
	buf := make([]byte, 7)
	if n, err := r.ReadAt(buf, 0); n != 7 || err != nil || string(buf) != "onetwo!" {
		t.Fatalf("ReadAt after remove = %d, %v, %q", n, err, buf)
	}
	// Create on an existing name is a new file; the old handle keeps the old.
	put(t, f, "b", []byte("new"), false, false)
	if n, _ := r.Size(); n != 7 {
		t.Fatalf("old handle size = %d after Create over its name", n)
	}
}

func TestFileSemantics(t *testing.T) {
	f := New()
	h := put(t, f, "f", []byte("ab"), false, false)
	_, err := h.WriteAt([]byte("z"), 5) // past the end: zeros between
	ok(t, err)
	if got := content(t, f, "f"); string(got) != "ab\x00\x00\x00z" {
		t.Fatalf("f = %q", got)
	}
	buf := make([]byte, 4)
	if n, err := h.ReadAt(buf, 4); n != 2 || err != io.EOF {
		t.Fatalf("short ReadAt = %d, %v; want 2, io.EOF", n, err)
	}
	if n, err := h.ReadAt(buf, 10); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt past end = %d, %v; want 0, io.EOF", n, err)
	}
	in := []byte("q")
	_, err = h.WriteAt(in, 0)
	ok(t, err)
	in[0] = 'X' // the FS must have copied it
	if got := content(t, f, "f"); got[0] != 'q' {
		t.Fatal("WriteAt kept the caller's slice")
	}
	r, err := f.Open("f")
	ok(t, err)
	if _, err := r.WriteAt([]byte("x"), 0); err == nil {
		t.Fatal("WriteAt on a read-only handle succeeded")
	}
	ok(t, h.Close())
	for name, err := range map[string]error{
		"read": errOf(h.ReadAt(buf, 0)), "write": errOf(h.WriteAt(buf, 0)),
		"sync": h.Sync(), "size": errOf(h.Size()), "close": h.Close(),
	} {
		if !errors.Is(err, fs.ErrClosed) {
			t.Errorf("%s after Close: err = %v, want fs.ErrClosed", name, err)
		}
	}
	for name, err := range map[string]error{
		"open": errOf(f.Open("nope")), "openwrite": errOf(f.OpenWrite("nope")),
		"remove": f.Remove("nope"), "rename": f.Rename("nope", "x"),
		"list": errOf(f.List("nodir")), "syncdir": f.SyncDir("nodir"),
		"create": errOf(f.Create("nodir/x")),
	} {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s of a missing name: err = %v, want fs.ErrNotExist", name, err)
		}
	}
	ok(t, f.MkdirAll("./sub/dir/"))
	put(t, f, "sub/z", nil, false, false)
	put(t, f, "sub/a", nil, false, false)
	if names, err := f.List("sub"); err != nil || !slices.Equal(names, []string{"a", "z"}) {
		t.Fatalf("List(sub) = %q, %v; want files only, sorted", names, err)
	}
	if _, err := f.Create("sub/dir"); err == nil {
		t.Fatal("Create over a directory succeeded")
	}
	if err := f.MkdirAll("sub/a/b"); err == nil {
		t.Fatal("MkdirAll through a file succeeded")
	}
}

func TestReadWriteFileHelpers(t *testing.T) {
	f := New()
	h := put(t, f, "f", []byte("unsynced"), false, false)
	ops := f.Ops()
	ok(t, f.WriteFile("f", []byte("corrupt")))
	fresh := []byte("fresh")
	ok(t, f.WriteFile("g", fresh))
	fresh[0] = 'X' // neither helper may alias the caller's slice
	got, err := f.ReadFile("g")
	ok(t, err)
	got[1] = 'X'
	if got, _ := f.ReadFile("g"); string(got) != "fresh" {
		t.Fatalf("g = %q: a helper shares memory with its caller", got)
	}
	if f.Ops() != ops {
		t.Fatal("WriteFile counted as an operation")
	}
	if n, _ := h.Size(); n != 7 {
		t.Fatal("an open handle does not see WriteFile's contents")
	}
	g := f.Restart(nil, 0)
	for name, want := range map[string]string{"f": "corrupt", "g": "fresh"} {
		if got, err := g.ReadFile(name); err != nil || string(got) != want {
			t.Fatalf("%s after restart = %q, %v; want %q", name, got, err, want)
		}
	}
	f.Crash()
	if _, err := f.ReadFile("f"); err != nil {
		t.Fatalf("ReadFile on a crashed FS: %v", err)
	}
}

// Run with -race: every method from many goroutines at once.
func TestConcurrent(t *testing.T) {
	f := New()
	ok(t, f.MkdirAll("d"))
	f.SetHook(func(Op) {})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("d/f%d", g)
			for i := range 50 {
				h, err := f.Create(name)
				ok(t, err)
				_, err = h.WriteAt(bytes.Repeat([]byte{byte(i)}, 100), int64(i))
				ok(t, err)
				ok(t, h.Sync())
				ok(t, f.Rename(name, name+".done"))
				ok(t, f.SyncDir("d"))
				_, err = f.List("d")
				ok(t, err)
				_, err = h.ReadAt(make([]byte, 10), 0)
				ok(t, err)
				ok(t, h.Close())
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			f.Restart(seeded(uint64(i)), 50)
			f.Ops()
			f.Crashed()
		}
	})
	wg.Wait()
	if f.Ops() != 8*50*5+1 {
		t.Fatalf("Ops() = %d, want %d", f.Ops(), 8*50*5+1)
	}
}
