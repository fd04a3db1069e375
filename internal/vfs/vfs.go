// Package vfs is the small file-system interface the log and the snapshot
// files are written through. The operating system implements it (OS); a
// strict in-memory implementation that loses unsynced writes on a simulated
// crash lives in vfs/strictfs, so that crash tests can see a missing fsync,
// which a SIGKILL (the page cache survives it) never shows.
package vfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// FS is what the log and snapshots need from a file system. Paths are OS
// paths (filepath).
type FS interface {
	// Create creates name, or truncates it if it exists, open for reading
	// and writing. The new directory entry is durable only after SyncDir.
	Create(name string) (File, error)
	// Open opens an existing file read-only.
	Open(name string) (File, error)
	// OpenWrite opens an existing file for reading and writing without
	// truncating it.
	OpenWrite(name string) (File, error)
	// Rename renames oldname to newname, replacing newname if it exists.
	// Durable only after SyncDir of both directories.
	Rename(oldname, newname string) error
	// Remove removes a file. A missing file gives an error that satisfies
	// errors.Is(err, fs.ErrNotExist).
	Remove(name string) error
	// MkdirAll creates dir and any missing parents, durably: each directory
	// it creates is synced into its parent.
	MkdirAll(dir string) error
	// List returns the names of the regular files in dir, sorted. A missing
	// dir gives an error that satisfies errors.Is(err, fs.ErrNotExist).
	List(dir string) ([]string, error)
	// SyncDir makes dir's entries (files created, renamed or removed in it)
	// durable.
	SyncDir(dir string) error
}

// File is an open file. Writes are positional: the log keeps its own
// offsets, and positional writes need no shared file cursor.
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes the file's data durable.
	Sync() error
	// Size is the current length of the file.
	Size() (int64, error)
}

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) OpenWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error             { return os.Remove(name) }

func (osFS) MkdirAll(dir string) error {
	// Find the directories that do not exist yet, create them, then sync
	// each into its parent, so that a crash cannot lose a directory that
	// files were then created in.
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	slices.Reverse(missing)
	for _, d := range missing {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

func (osFS) List(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(des))
	for _, de := range des { // ReadDir sorts by name
		if de.Type().IsRegular() {
			names = append(names, de.Name())
		}
	}
	return names, nil
}

func (osFS) SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadFile reads a whole file through fsys.
func ReadFile(fsys FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// WriteFileAtomic replaces name with data durably: written to name+".tmp",
// synced, renamed over name, and the directory synced. A crash leaves
// either the old content or the new, never a mix.
func WriteFileAtomic(fsys FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, name)
	}
	if err != nil {
		fsys.Remove(tmp)
		return err
	}
	return fsys.SyncDir(filepath.Dir(name))
}
