package pools

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func lendableRegistry(t *testing.T, urls ...string) *Registry {
	t.Helper()
	r, err := NewRegistry([]PoolConfig{
		{Name: "main", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: urls[0]}}},
		{Name: "trainer", Lendable: true, ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: urls[1]}}},
	}, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLendableAdmission(t *testing.T) {
	r := lendableRegistry(t, "http://a:1", "http://b:1")
	main, lent := r.Endpoints()[0], r.Endpoints()[1]
	now := time.Now()
	if lent.Available() || lent.Pool.Lent() {
		t.Fatal("a lendable pool never lent takes traffic")
	}
	lent.Pool.SetLease(Lease{Until: now.Add(time.Hour), Grace: time.Minute}, now)
	if !lent.Available() || !lent.Pool.Lent() {
		t.Fatal("a lent pool takes no traffic")
	}
	ids := func(eps []*Endpoint) (s []string) {
		for _, ep := range eps {
			s = append(s, ep.ID)
		}
		return s
	}
	if got := ids(KeepAdmitting(r.EndpointsFor(nil, "m"), false)); len(got) != 1 || got[0] != main.ID {
		t.Errorf("candidates of a foreground turn: %v, want the main pool's only", got)
	}
	if got := ids(KeepAdmitting(r.EndpointsFor(nil, "m"), true)); len(got) != 2 {
		t.Errorf("candidates of a background turn: %v, want both pools'", got)
	}
	// Reclaimed: admission stops at once, whatever the window says.
	lent.Pool.SetLease(Lease{Until: now.Add(time.Hour), Grace: time.Minute, ReclaimedAt: now, ReclaimBy: now.Add(time.Minute)}, now)
	if lent.Available() {
		t.Fatal("a reclaimed pool still takes traffic")
	}
	if n := lent.Pool.Reclaims(); n != 1 {
		t.Errorf("reclaims = %d, want 1", n)
	}
	// Applying the same lease again (another gateway's refresh) counts nothing.
	lent.Pool.SetLease(lent.Pool.Lease(), now)
	if n := lent.Pool.Reclaims(); n != 1 {
		t.Errorf("reclaims after reapplying = %d, want 1", n)
	}
	if !main.Available() {
		t.Error("lending state leaked into a pool that is not lendable")
	}
	// A lease for a pool that is not lendable is ignored.
	main.Pool.SetLease(Lease{Until: now.Add(-time.Second)}, now)
	if !main.Available() {
		t.Error("a lease closed a pool that is not lendable")
	}
}

func TestLeaseWindowEnds(t *testing.T) {
	r := lendableRegistry(t, "http://a:1", "http://b:1")
	p := r.Pools[1]
	now := time.Now()
	p.SetLease(Lease{Until: now.Add(20 * time.Millisecond), Grace: time.Minute}, now)
	waitFor(t, "the window's end to reclaim the pool", func() bool { return !p.Lent() })
	if n := p.Reclaims(); n != 1 {
		t.Errorf("reclaims when the window ran out = %d, want 1", n)
	}
}

// TestReclaimCutsLentWork: a lent request in flight when the reclaim's
// deadline passes is cut with ErrReclaimed, whether its answer has begun
// or not, and counted; the breaker is not charged for it.
func TestReclaimCutsLentWork(t *testing.T) {
	started := make(chan struct{}, 2)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices a client gone only once the body is read
		if r.URL.Path == "/v1/stream" {
			w.Write([]byte("data: {}\n\n"))
			w.(http.Flusher).Flush()
		}
		started <- struct{}{}
		<-r.Context().Done()
	}))
	defer engine.Close()
	r := lendableRegistry(t, "http://a:1", engine.URL)
	ep := r.Endpoints()[1]
	now := time.Now()
	ep.Pool.SetLease(Lease{Until: now.Add(time.Hour), Grace: time.Minute}, now)

	streamed, err := r.Client().Send(context.Background(), ep, "/v1/stream", []byte(`{}`), nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer streamed.Body.Close()
	<-started
	waiting := make(chan error, 1)
	go func() {
		resp, err := r.Client().Send(context.Background(), ep, "/v1/chat/completions", []byte(`{}`), nil, 10)
		if err == nil {
			resp.Body.Close()
		}
		waiting <- err
	}()
	<-started
	if n := ep.Pool.LentInFlight(); n != 2 {
		t.Fatalf("lent in flight = %d, want 2", n)
	}
	ep.Pool.SetLease(Lease{Until: now.Add(time.Hour), Grace: time.Minute, ReclaimedAt: now, ReclaimBy: now}, time.Now())

	if err := <-waiting; !errors.Is(err, ErrUpstream) || !errors.Is(err, ErrReclaimed) {
		t.Errorf("a request cut before its answer: %v, want ErrUpstream and ErrReclaimed (retried elsewhere)", err)
	}
	_, err = io.ReadAll(streamed.Body)
	if !errors.Is(err, ErrReclaimed) || !strings.Contains(err.Error(), "reclaimed") {
		t.Errorf("a stream cut by the reclaim: %v, want ErrReclaimed", err)
	}
	if n := ep.Pool.CancelledByReclaim(); n != 2 {
		t.Errorf("cancelled by reclaim = %d, want 2", n)
	}
	if n := ep.Pool.LentInFlight(); n != 0 {
		t.Errorf("lent in flight after the cut = %d", n)
	}
	if c := ep.breaker.Counts(); c.TotalFailures != 0 {
		t.Errorf("breaker charged %d failures for reclaimed work", c.TotalFailures)
	}
}

func TestValidateLendable(t *testing.T) {
	err := ValidatePools([]PoolConfig{
		{Name: "main", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://a:1"}}},
		{Name: "p", Role: RolePrefill, Lendable: true, ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://b:1"}}},
	})
	if err == nil || !strings.Contains(err.Error(), "pools[1].lendable") {
		t.Fatalf("ValidatePools = %v, want pools[1].lendable refused", err)
	}
}

func BenchmarkAvailableLendable(b *testing.B) {
	r, err := NewRegistry([]PoolConfig{{Name: "t", Lendable: true, ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://b:1"}}}}, Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ep := r.Endpoints()[0]
	b.ReportAllocs()
	for b.Loop() {
		_ = ep.Available()
	}
}

func TestKeepAdmittingAllocs(t *testing.T) {
	r := lendableRegistry(t, "http://a:1", "http://b:1")
	buf := make([]*Endpoint, 0, 4)
	if n := testing.AllocsPerRun(100, func() {
		_ = KeepAdmitting(r.EndpointsFor(buf[:0], "m"), false)
		_ = r.Endpoints()[1].Available()
	}); n != 0 {
		t.Errorf("%v allocations a pick's candidate filter, want 0", n)
	}
}
