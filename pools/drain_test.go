package pools

import (
	"context"
	"testing"
	"time"
)

// TestOnDrain: the OnDrain hooks hear an endpoint each time it starts to
// drain, not while it stays drained, and Close waits for them.
func TestOnDrain(t *testing.T) {
	reg, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://127.0.0.1:1"}}}},
		Options{HealthInterval: time.Hour, ScrapeInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan string, 4)
	reg.OnDrain(func(_ context.Context, ep *Endpoint) { heard <- ep.ID })
	if err := reg.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer reg.Close(context.Background())
	ep := reg.Endpoints()[0]
	expect := func(want int) {
		t.Helper()
		for range want {
			select {
			case id := <-heard:
				if id != ep.ID {
					t.Fatalf("heard %s, want %s", id, ep.ID)
				}
			case <-time.After(time.Minute):
				t.Fatal("the hook did not hear the drain")
			}
		}
		select {
		case id := <-heard:
			t.Fatalf("heard %s once more", id)
		default:
		}
	}
	ep.SetDraining(true)
	expect(1)
	ep.SetDraining(true) // still draining: nothing new
	ep.SetDraining(false)
	reg.Close(context.Background())
	expect(0)
	if ep.Joined().IsZero() {
		t.Error("Joined is zero for an endpoint of the registry")
	}
}

// TestOnDrainAgain: an endpoint drained, undrained and drained again is
// heard twice.
func TestOnDrainAgain(t *testing.T) {
	reg, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://127.0.0.1:1"}}}},
		Options{HealthInterval: time.Hour, ScrapeInterval: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan struct{}, 4)
	reg.OnDrain(func(context.Context, *Endpoint) { heard <- struct{}{} })
	ep := reg.Endpoints()[0]
	ep.SetDraining(true)
	ep.SetDraining(false)
	ep.SetDraining(true)
	if err := reg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(heard); n != 2 {
		t.Errorf("heard %d drains, want 2", n)
	}
}
