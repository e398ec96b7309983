package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cockroachdb/pebble/v2"
)

// PebbleOptions configure OpenPebble.
type PebbleOptions struct {
	// Logger receives Pebble's own log lines; nil means slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills the zero fields.
func (o *PebbleOptions) EnsureDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// pebbleFormat is the store's format: the first whose tables take
// MinLZ, the fastest of Pebble's compressions on amd64, which compresses
// and decompresses the tables that flushes and compactions write for
// less CPU than Snappy, Pebble's default. A store an older version
// created is moved up to it when opened.
const pebbleFormat = pebble.FormatTableFormatV6

// OpenPebble opens (creating if needed) the Pebble database in dir.
func OpenPebble(dir string, opts PebbleOptions) (*DB, error) {
	opts.EnsureDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	po := &pebble.Options{Logger: pebbleLogger{opts.Logger}, FormatMajorVersion: pebbleFormat}
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionFastest })
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("state: opening the store in %s: %w", dir, err)
	}
	return newDB(newFlat(&pebbleEngine{db: db}), opts.Logger), nil
}

// pebbleEngine is the embedded engine. It takes no lock: each apply is a
// batch of its own, so concurrent synced applies share WAL syncs in
// Pebble's commit pipeline.
type pebbleEngine struct {
	db *pebble.DB
}

func (e *pebbleEngine) get(key []byte) ([]byte, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("state: reading %q: %w", key, err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

func (e *pebbleEngine) scan(lo, hi []byte, reverse bool, fn func(key, value []byte) error) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	ok, step := it.First(), it.Next
	if reverse {
		ok, step = it.Last(), it.Prev
	}
	for ; ok; ok = step() {
		v, err := it.ValueAndErr()
		if err != nil {
			break // it.Close reports it
		}
		if err := fn(it.Key(), v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	return nil
}

func (e *pebbleEngine) apply(prefix []byte, b *Batch) error {
	pb, err := e.batch(prefix, b)
	if err != nil {
		return err
	}
	defer pb.Close()
	opts := pebble.NoSync
	if b.Sync {
		opts = pebble.Sync
	}
	if err := pb.Commit(opts); err != nil {
		return fmt.Errorf("state: commit: %w", err)
	}
	return nil
}

// batch is b as a Pebble batch, with prefix before every key; the caller
// closes it (on an error, batch has). It is sized once for all its ops:
// grown by doubling, a large value would be copied at each step and end
// in a buffer up to twice its size. A Value is written straight into it.
func (e *pebbleEngine) batch(prefix []byte, b *Batch) (*pebble.Batch, error) {
	size := pebbleBatchSize(prefix, b)
	pb := e.db.NewBatchWithSize(size, pebble.WithInitialSizeBytes(size))
	// Pebble copies keys into the batch, so one buffer serves every op.
	var arr [128]byte
	buf := arr[:0]
	for i := range b.ops {
		o := &b.ops[i]
		buf = append(append(buf[:0], prefix...), o.key...)
		var err error
		switch {
		case o.kind == opPut && o.enc != nil:
			d := pb.SetDeferred(len(buf), o.enc.Len())
			copy(d.Key, buf)
			o.appendValue(d.Value[:0:len(d.Value)])
			err = d.Finish()
		case o.kind == opPut:
			err = pb.Set(buf, o.value, nil)
		case o.kind == opDelete:
			err = pb.Delete(buf, nil)
		case o.kind == opDeletePrefix:
			err = pb.DeleteRange(buf, prefixEnd(buf), nil)
		}
		if err != nil {
			pb.Close()
			return nil, fmt.Errorf("state: batch: %w", err)
		}
	}
	return pb, nil
}

// pebbleBatchSize is the room b takes in a Pebble batch: its 12-byte
// header, then what Pebble reserves for each op as it adds it (a kind
// byte, two length varints of at most 5 bytes, the key and the value,
// or the end key of a range), and the 20 bytes more it asks for its
// first op (two varints of up to 10). With that room it never grows.
func pebbleBatchSize(prefix []byte, b *Batch) int {
	n := 12 + 20
	for i := range b.ops {
		o := &b.ops[i]
		k := len(prefix) + len(o.key)
		n += 1 + 2*5 + k
		switch o.kind {
		case opPut:
			n += o.valueLen()
		case opDeletePrefix:
			n += k // prefixEnd is no longer than the prefix
		}
	}
	return n
}

// close closes the database; closing the WAL syncs what unsynced batches
// wrote.
func (e *pebbleEngine) close() error { return e.db.Close() }

// pebbleLogger sends Pebble's log lines to slog: its chatter at debug,
// its errors at warn.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l.Enabled(context.Background(), slog.LevelDebug) {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Warn("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}

var (
	_ flatEngine    = (*pebbleEngine)(nil)
	_ pebble.Logger = pebbleLogger{}
)
