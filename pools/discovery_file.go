package pools

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/internal/filewatch"
)

// DefaultFileResync is how often a file source reads its file even when
// no change was notified: a watch can miss one on some file systems, and
// a file that was broken may have been fixed in place.
const DefaultFileResync = 10 * time.Second

// FileSource is kind file: an endpoints file, YAML or JSON,
//
//	endpoints:
//	  - address: 10.0.0.7
//	    port: 8000
//	    kvEvents: tcp://10.0.0.7:5557   # optional
//	    bootstrapPort: 8998             # optional
//	    labels: {role: decode, revision: r2, models: "llama,llama-fast"}
//
// read at Start and again whenever its directory changes. The directory is
// watched, not the file, so that both ways of replacing a file whole are
// seen: a rename over it, and the swap of a symlink on its path (as a
// ConfigMap volume updates, through its ..data link). An entry that is not
// valid is skipped with a log line and turnpike_discovery_bad_entries_total;
// a file that cannot be read or parsed keeps the last good set, with a log
// line saying why and turnpike_discovery_errors_total.
type FileSource struct {
	pool, path, scheme string
	log                *slog.Logger
	metrics            *discoveryMetrics
	// Resync is the fallback read interval; DefaultFileResync when zero.
	Resync time.Duration

	rc   reconciler
	last []byte // the last file read whole, good or not
	// err is the last read's problem, nil after a good read.
	mu struct {
		sync.Mutex
		err error
	}
	watcher *filewatch.Watcher
}

// NewFileSource builds the file source of the named pool. Nothing is read
// before Start. A nil metrics counts nothing.
func NewFileSource(pool, path, scheme string, log *slog.Logger, metrics *discoveryMetrics) *FileSource {
	if log == nil {
		log = slog.Default()
	}
	if metrics == nil {
		metrics = newDiscoveryMetrics()
	}
	return &FileSource{pool: pool, path: path, scheme: scheme, log: log.With("pool", pool, "discovery", "file", "path", path),
		metrics: metrics}
}

// Start reads the file and reports its endpoints, then watches it. A file
// that cannot be read or parsed at Start is an error: there is no last
// good set to keep.
func (s *FileSource) Start(_ context.Context, sink Sink) error {
	s.rc.sink = sink
	// Watch before the first read, so that a change between the two is
	// not lost.
	w, err := filewatch.New(s.path)
	if err != nil {
		return fmt.Errorf("pools: file discovery: %w", err)
	}
	if err := s.read(true); err != nil {
		w.Close(context.Background())
		return err
	}
	s.watcher = w
	w.Run(cmp.Or(s.Resync, DefaultFileResync), func(event string, err error) {
		// Any change in the directory may be the file's: a rename over
		// it, a symlink on its path swapped, the file written in place.
		// An unchanged file is read and dropped.
		if err != nil {
			s.log.Warn("endpoints file watch error; reading again", "err", err)
		} else {
			s.log.Debug("endpoints file directory changed", "event", event)
		}
		_ = s.read(false)
	})
	return nil
}

// Err is the problem of the last read of the file, nil when it was good.
func (s *FileSource) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

// Close stops watching, up to ctx.
func (s *FileSource) Close(ctx context.Context) error {
	if s.watcher == nil {
		return nil
	}
	if err := s.watcher.Close(ctx); err != nil {
		return fmt.Errorf("pools: file discovery: close: %w", err)
	}
	return nil
}

// read reads and applies the file. A file like the last one read is not
// parsed again. A bad file keeps the last good set.
func (s *FileSource) read(first bool) error {
	b, err := os.ReadFile(s.path)
	if err == nil && !first && bytes.Equal(b, s.last) {
		return s.Err()
	}
	if err == nil {
		s.last = b
		var want map[string]Target
		if want, err = s.parse(b); err == nil {
			added, removed := s.rc.apply(want)
			s.setErr(nil)
			if !first {
				s.log.Info("endpoints file read", "endpoints", len(want), "added", added, "removed", removed)
			}
			return nil
		}
	}
	err = fmt.Errorf("pools: endpoints file %s: %w", s.path, err)
	if s.setErr(err) || first {
		s.metrics.errors.WithLabelValues(s.pool).Inc()
		s.log.Warn("endpoints file unreadable or invalid; keeping the last good set", "err", err, "endpoints", len(s.rc.last))
	}
	return err
}

// setErr records the last read's problem and reports whether it differs
// from the one before, so that a broken file is reported once, not at
// every resync.
func (s *FileSource) setErr(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := (err == nil) != (s.mu.err == nil) || err != nil && err.Error() != s.mu.err.Error()
	s.mu.err = err
	return changed
}

// fileEntry is one entry of an endpoints file.
type fileEntry struct {
	Address       string            `yaml:"address"`
	Port          int               `yaml:"port"`
	KVEvents      string            `yaml:"kvEvents"`
	BootstrapPort int               `yaml:"bootstrapPort"`
	Labels        map[string]string `yaml:"labels"`
}

var fileEntryKeys = map[string]bool{"address": true, "port": true, "kvEvents": true, "bootstrapPort": true, "labels": true}

// errNoEndpointsKey is a file without the endpoints key: most likely not
// an endpoints file, or one caught half written.
var errNoEndpointsKey = errors.New("no endpoints key (want endpoints: [{address, port, labels}])")

// parse reads an endpoints file into its set of targets for this pool.
// Entries that are not valid are skipped and counted; entries of another
// pool are left out. The file's own shape (not YAML or JSON, no endpoints
// key, unknown top-level keys) makes it invalid.
func (s *FileSource) parse(b []byte) (map[string]Target, error) {
	var doc struct {
		Endpoints *[]yaml.Node `yaml:"endpoints"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if doc.Endpoints == nil {
		return nil, errNoEndpointsKey
	}
	want := map[string]Target{}
	for i := range *doc.Endpoints {
		t, mine, err := s.entry(&(*doc.Endpoints)[i])
		if err == nil && mine {
			if _, dup := want[t.ID()]; dup {
				err = fmt.Errorf("%s listed twice", t.ID())
			}
		}
		if err != nil {
			s.metrics.badEntries.WithLabelValues(s.pool).Inc()
			s.log.Warn("endpoints file entry skipped", "entry", i, "err", err)
			continue
		}
		if mine {
			want[t.ID()] = t
		}
	}
	return want, nil
}

// entry reads one entry; mine is false for an entry of another pool.
func (s *FileSource) entry(n *yaml.Node) (t Target, mine bool, err error) {
	if n.Kind != yaml.MappingNode {
		return Target{}, false, fmt.Errorf("line %d: not a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !fileEntryKeys[k] {
			return Target{}, false, fmt.Errorf("line %d: unknown key %q", n.Content[i].Line, k)
		}
	}
	var e fileEntry
	if err := n.Decode(&e); err != nil {
		return Target{}, false, fmt.Errorf("line %d: %w", n.Line, err)
	}
	labels, err := parseLabels(e.Labels)
	if err != nil {
		return Target{}, false, fmt.Errorf("line %d: %w", n.Line, err)
	}
	if labels.Pool != "" && labels.Pool != s.pool {
		return Target{}, false, nil
	}
	u, err := hostPortURL(s.scheme, e.Address, e.Port)
	if err != nil {
		return Target{}, false, fmt.Errorf("line %d: %w", n.Line, err)
	}
	if e.BootstrapPort < 0 || e.BootstrapPort > 65535 {
		return Target{}, false, fmt.Errorf("line %d: bootstrapPort %d is not a port", n.Line, e.BootstrapPort)
	}
	return Target{URL: u, KVEvents: e.KVEvents, BootstrapPort: e.BootstrapPort, Labels: labels}, true, nil
}

var _ Source = (*FileSource)(nil)
