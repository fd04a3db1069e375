package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/wal"
)

// meta is stored in the data directory for operators and tools. The
// partition count decides where every key lives, so it cannot change under
// existing data; the log records it too (in every segment header) and is
// the authority: surge.json must agree with it.
type meta struct {
	FormatVersion int `json:"formatVersion"`
	Partitions    int `json:"partitions"`
}

const (
	metaFormatVersion = 1
	metaFile          = "surge.json"
)

// readMeta returns the partition count in surge.json, or 0 if there is no
// such file.
func readMeta(dir string) (int, error) {
	path := filepath.Join(dir, metaFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, fmt.Errorf("%s is not valid JSON (%v); correct it, or move it aside: the partition count is then read from the log", path, err)
	}
	if m.FormatVersion != metaFormatVersion {
		return 0, fmt.Errorf("%s has format version %d; this binary reads version %d", path, m.FormatVersion, metaFormatVersion)
	}
	if m.Partitions < 1 || m.Partitions > wal.MaxPartitions {
		return 0, fmt.Errorf("%s says \"partitions\": %d, which is not a partition count (1 to %d); correct it, or move it aside: the count is then read from the log",
			path, m.Partitions, wal.MaxPartitions)
	}
	return m.Partitions, nil
}

func writeMeta(dir string, partitions int) error {
	b, _ := json.Marshal(meta{FormatVersion: metaFormatVersion, Partitions: partitions})
	return vfs.WriteFileAtomic(vfs.OS, filepath.Join(dir, metaFile), append(b, '\n'))
}

// openLog opens the log with the partition count the flag, surge.json and
// the log agree on (a new data directory takes the flag, or the default),
// and brings surge.json in line with the log.
func openLog(cfg Config, opts wal.Options) (*wal.Log, error) {
	if cfg.Partitions < 0 || cfg.Partitions > wal.MaxPartitions {
		return nil, fmt.Errorf("--partitions %d: must be between 1 and %d (or 0: the data directory's count, %d for a new one)",
			cfg.Partitions, wal.MaxPartitions, engine.DefaultPartitions)
	}
	inMeta, err := readMeta(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Partitions > 0 && inMeta > 0 && cfg.Partitions != inMeta {
		return nil, flagMetaConflict(cfg, opts, inMeta)
	}
	opts.Partitions = max(cfg.Partitions, inMeta)
	lg, err := wal.Open(opts)
	if errors.Is(err, wal.ErrPartitionsUnknown) {
		opts.Partitions = engine.DefaultPartitions
		lg, err = wal.Open(opts)
	}
	if errors.Is(err, wal.ErrPartitionMismatch) && cfg.Partitions == 0 {
		return nil, fmt.Errorf("%s disagrees with the log, which is the authority: %w. Correct the file's \"partitions\", or move it aside",
			filepath.Join(cfg.DataDir, metaFile), err)
	}
	if err != nil {
		return nil, err
	}
	if n := lg.Partitions(); n != inMeta {
		if err := writeMeta(cfg.DataDir, n); err != nil {
			lg.Close()
			return nil, fmt.Errorf("writing %s: %w", metaFile, err)
		}
	}
	return lg, nil
}

// flagMetaConflict explains why --partitions disagrees with surge.json.
// Where there is a log it is the authority, so it is asked which of the
// two is wrong; without one, surge.json is the only record.
func flagMetaConflict(cfg Config, opts wal.Options, inMeta int) error {
	flagWrong := fmt.Errorf("data directory %s was created with %d partitions; --partitions %d cannot change that (keys would move). Start with --partitions %d or 0",
		cfg.DataDir, inMeta, cfg.Partitions, inMeta)
	opts.Partitions = 0 // as recorded; creates nothing if there is no log
	lg, err := wal.Open(opts)
	if errors.Is(err, wal.ErrPartitionsUnknown) {
		return flagWrong
	}
	if err != nil {
		return err
	}
	n := lg.Partitions()
	if err := lg.Close(); err != nil {
		return err
	}
	metaPath := filepath.Join(cfg.DataDir, metaFile)
	switch n {
	case inMeta:
		return flagWrong
	case cfg.Partitions:
		return fmt.Errorf("%s says %d partitions, but the log, which is the authority, was written with %d, as --partitions says. Correct the file's \"partitions\" to %d, or move it aside",
			metaPath, inMeta, n, n)
	}
	return fmt.Errorf("%w: the log in %s was written with %d partitions, not %d; keys would move to other partitions. Start with --partitions %d (or 0), and correct %s, which says %d",
		wal.ErrPartitionMismatch, opts.Dir, n, cfg.Partitions, n, metaPath, inMeta)
}

// lockDir takes an exclusive lock on the data directory: two processes
// appending to one log would corrupt it. The kernel drops the lock when the
// process dies, so a kill -9 leaves nothing stale behind.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another surge process (%v)", dir, err)
	}
	return func() { f.Close() }, nil
}

// openDataDir opens the embedded log and snapshots in cfg.DataDir, locked
// for this process, into opts; closeLog closes what the engine would have
// closed had it opened.
func (s *Server) openDataDir(opts *engine.Options) (closeLog func(), err error) {
	cfg := s.cfg
	if err := vfs.OS.MkdirAll(cfg.DataDir); err != nil {
		return nil, err
	}
	unlock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s.undo = append(s.undo, unlock)
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_wal_fsync_seconds",
		Help:    "Time of one group commit: write plus fsync.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	})
	syncRecords := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_wal_group_commit_records",
		Help:    "Records made durable by one fsync (all partitions).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	s.reg.MustRegister(fsync, syncRecords)
	lg, err := openLog(cfg, wal.Options{
		Dir:          filepath.Join(cfg.DataDir, "wal"),
		SyncInterval: cfg.SyncInterval,
		OnSync: func(d time.Duration, records, _ int) {
			fsync.Observe(d.Seconds())
			syncRecords.Observe(float64(records))
		},
	})
	if err != nil {
		return nil, err
	}
	if rec := lg.Recovery(); rec.File != "" {
		s.logger.Warn("cut a torn write (never acknowledged) from the end of the log", "file", rec.File, "bytes", rec.TruncatedBytes)
	}
	snaps, err := wal.OpenSnapshotDir(vfs.OS, filepath.Join(cfg.DataDir, "snapshots"))
	if err != nil {
		lg.Close()
		return nil, err
	}
	opts.Partitions, opts.Log, opts.Snapshots = lg.Partitions(), lg, snaps
	return func() { lg.Close() }, nil
}
