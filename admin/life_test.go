package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestStartRefreshes: a Service started with a RefreshInterval applies,
// unasked, a key another gateway on its store creates; Close stops it.
func TestStartRefreshes(t *testing.T) {
	ctx := context.Background()
	kv := memKV(t)
	a := newFixture(t, kv, admin.Config{})
	keys := &keyring{}
	b, err := admin.New(ctx, admin.Deps{Store: kv, Keys: keys, RefreshInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.svc.CreateTenant(ctx, turns.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	_, secret, err := a.svc.CreateKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	// A bound only for a failure: the refresh comes every millisecond.
	for deadline := time.Now().Add(10 * time.Second); keys.tenant(secret) != "acme"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the started service never applied the other gateway's key")
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}
