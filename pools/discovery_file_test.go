package pools

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// discoveryDeadline bounds every wait on discovery: generous, since a
// loaded machine delivers file events and informer updates late; a
// passing run waits milliseconds.
const discoveryDeadline = 30 * time.Second

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(discoveryDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ids lists the IDs of the registry's current endpoints, sorted.
func ids(r *Registry) []string {
	var out []string
	for _, ep := range r.Endpoints() {
		out = append(out, ep.ID)
	}
	slices.Sort(out)
	return out
}

// engine is a test engine that answers /metrics and /health.
func engine(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprintln(w, "vllm:num_requests_running 0")
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostPort(t *testing.T, s *httptest.Server) (string, string) {
	u, _ := url.Parse(s.URL)
	return u.Hostname(), u.Port()
}

// writeAtomic writes b to path as an editor or a config tool does: a
// temporary file beside it renamed over it.
func writeAtomic(t *testing.T, path, b string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func fileRegistry(t *testing.T, path string, extra ...PoolConfig) *Registry {
	t.Helper()
	pcs := append([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{Kind: DiscoveryFile, Path: path}}}, extra...)
	r, err := NewRegistry(pcs, Options{ScrapeInterval: 20 * time.Millisecond, HealthInterval: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func TestFileDiscovery(t *testing.T) {
	e1, e2, e3 := engine(t), engine(t), engine(t)
	h1, p1 := hostPort(t, e1)
	h2, p2 := hostPort(t, e2)
	h3, p3 := hostPort(t, e3)
	id1, id2, id3 := h1+":"+p1, h2+":"+p2, h3+":"+p3

	t.Run("atomic rename", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "endpoints.yaml")
		writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s, labels: {role: decode, revision: r1}}\n", h1, p1))
		r := fileRegistry(t, path)
		if got := ids(r); !slices.Equal(got, []string{id1}) {
			t.Fatalf("endpoints at start %v", got)
		}
		ep := r.Endpoints()[0]
		if l := ep.Labels(); l.Role != RoleDecode || l.Revision != "r1" || l.Pool != "p" {
			t.Errorf("labels %+v", l)
		}
		eventually(t, "the first scrape", func() bool { return ep.Available() })

		// JSON is YAML too.
		writeAtomic(t, path, fmt.Sprintf(`{"endpoints": [{"address": %q, "port": %s}, {"address": %q, "port": %s}]}`, h2, p2, h3, p3))
		eventually(t, "the set to follow the rename", func() bool { return slices.Equal(ids(r), sorted(id2, id3)) })
		eventually(t, "the left endpoint to drain", func() bool { return isClosed(ep.Drained()) })
		if ep.Available() {
			t.Error("an endpoint that left is still available")
		}
		for _, ep := range r.Endpoints() {
			eventually(t, ep.ID+" to take traffic after its first scrape", ep.Available)
		}
	})

	t.Run("symlink swap", func(t *testing.T) {
		// A ConfigMap volume: path → ..data/endpoints.yaml, ..data →
		// a timestamped directory; an update makes a new directory and
		// renames a new ..data link over the old.
		dir := t.TempDir()
		swap := func(gen int, body string) {
			ts := filepath.Join(dir, fmt.Sprintf("..gen%d", gen))
			if err := os.Mkdir(ts, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ts, "endpoints.yaml"), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(dir, "..data_tmp")
			if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		swap(1, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n", h1, p1))
		path := filepath.Join(dir, "endpoints.yaml")
		if err := os.Symlink(filepath.Join("..data", "endpoints.yaml"), path); err != nil {
			t.Fatal(err)
		}
		r := fileRegistry(t, path)
		if got := ids(r); !slices.Equal(got, []string{id1}) {
			t.Fatalf("endpoints at start %v", got)
		}
		swap(2, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n- {address: %s, port: %s}\n", h1, p1, h2, p2))
		eventually(t, "the set to follow the swap", func() bool { return slices.Equal(ids(r), sorted(id1, id2)) })
		swap(3, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n", h3, p3))
		eventually(t, "the set to follow the second swap", func() bool { return slices.Equal(ids(r), []string{id3}) })
	})

	t.Run("bad entries skipped", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "endpoints.yaml")
		writeAtomic(t, path, strings.Join([]string{
			"endpoints:",
			fmt.Sprintf("- {address: %s, port: %s}", h1, p1),
			"- {address: 10.0.0.9}",                                             // no port
			fmt.Sprintf("- {address: %s, port: %s, colour: red}", h2, p2),       // unknown key
			fmt.Sprintf("- {address: %s, port: %s, labels: {role: x}}", h2, p2), // bad role
			fmt.Sprintf("- {address: %s, port: %s}", h1, p1),                    // listed twice
			"- just a string",
			fmt.Sprintf("- {address: %s, port: %s, labels: {pool: other}}", h3, p3), // another pool's
		}, "\n"))
		r := fileRegistry(t, path, PoolConfig{Name: "other", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://" + id3}}})
		if got := ids(r); !slices.Equal(got, sorted(id1, id3)) {
			t.Fatalf("endpoints %v, want %s of p and %s of other", got, id1, id3)
		}
		if ep, _ := r.Endpoint(id3); ep.Pool.Name() != "other" {
			t.Errorf("%s is in pool %s", id3, ep.Pool.Name())
		}
		if n := testutil.ToFloat64(r.metrics.badEntries.WithLabelValues("p")); n != 5 {
			t.Errorf("bad entries counted %v, want 5", n)
		}
	})

	t.Run("broken file keeps the last good set", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "endpoints.yaml")
		writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n- {address: %s, port: %s}\n", h1, p1, h2, p2))
		r := fileRegistry(t, path)
		src := r.sources[0].(*FileSource)
		for i, broken := range []string{"endpoints: [", "{}", "nodes: []", ""} {
			writeAtomic(t, path, broken)
			eventually(t, fmt.Sprintf("broken file %d to be reported", i), func() bool { return src.Err() != nil })
			if got := ids(r); !slices.Equal(got, sorted(id1, id2)) {
				t.Fatalf("broken file %q: endpoints %v, want the last good set", broken, got)
			}
			// A good file clears the error, and the next broken one is
			// told again.
			writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n- {address: %s, port: %s}\n", h1, p1, h2, p2))
			eventually(t, "the good file to be read", func() bool { return src.Err() == nil })
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the missing file to be reported", func() bool { return src.Err() != nil })
		if got := ids(r); !slices.Equal(got, sorted(id1, id2)) {
			t.Fatalf("missing file: endpoints %v, want the last good set", got)
		}
		if n := testutil.ToFloat64(r.metrics.errors.WithLabelValues("p")); n < 5 {
			t.Errorf("errors counted %v, want at least 5", n)
		}
		// An empty list is a good file: no endpoints.
		writeAtomic(t, path, "endpoints: []\n")
		eventually(t, "the empty set", func() bool { return len(r.Endpoints()) == 0 })
	})

	t.Run("unreadable at start", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "endpoints.yaml")
		r, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{Kind: DiscoveryFile, Path: path}}}, Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		if err := r.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "endpoints.yaml") {
			t.Fatalf("Start with no file: %v", err)
		}
	})
}

// TestDrainWaitsForInFlight: an endpoint that leaves takes no new turns
// at once, and is forgotten (OnLeave, its index freed) only when its
// in-flight request has finished.
func TestDrainWaitsForInFlight(t *testing.T) {
	e1, e2 := engine(t), engine(t)
	h1, p1 := hostPort(t, e1)
	h2, p2 := hostPort(t, e2)
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n", h1, p1))
	r, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Discovery: &DiscoveryConfig{Kind: DiscoveryFile, Path: path}}},
		Options{ScrapeInterval: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	left := make(chan *Endpoint, 1)
	joined := make(chan string, 4)
	r.OnJoin(func(ep *Endpoint) { joined <- ep.ID })
	r.OnLeave(func(ep *Endpoint) { left <- ep })
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	ep := r.Endpoints()[0]
	eventually(t, "the first scrape", ep.Available)
	ep.inFlight.Add(1) // a turn in flight

	writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n", h2, p2))
	eventually(t, "the endpoint to leave", func() bool { return len(r.Endpoints()) == 1 && r.Endpoints()[0].ID != ep.ID })
	if ep.Available() || !ep.Draining() {
		t.Fatal("an endpoint that left takes new turns")
	}
	select {
	case <-left:
		t.Fatal("forgotten with a request in flight")
	case <-time.After(100 * time.Millisecond):
	}
	ep.inFlight.Add(-1)
	if got := <-left; got != ep {
		t.Fatalf("OnLeave saw %s", got.ID)
	}
	<-ep.Drained()
	if first := <-joined; first != h1+":"+p1 {
		t.Errorf("joined %s first", first)
	}

	// The freed index goes to the next endpoint that joins.
	writeAtomic(t, path, fmt.Sprintf("endpoints:\n- {address: %s, port: %s}\n- {address: %s, port: %s}\n", h2, p2, h1, p1))
	eventually(t, "the endpoint to come back", func() bool { return len(r.Endpoints()) == 2 })
	back, _ := r.Endpoint(h1 + ":" + p1)
	if back == ep || back.Index != ep.Index {
		t.Errorf("rejoined as index %d (the old one was %d)", back.Index, ep.Index)
	}
	if !back.Joining() && back.Load().ScrapedAt.IsZero() {
		t.Error("a joining endpoint took traffic before its first scrape")
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
