package responses

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestStoreCloseUnderLoad: Close waits for the operations in flight, and
// operations after it answer ErrClosed; none reaches a closed database.
func TestStoreCloseUnderLoad(t *testing.T) {
	for round := range 5 {
		st := openStore(t, t.TempDir())
		ctx := context.Background()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := 0; ; i++ {
					id := fmt.Sprintf("resp_%d_%d", g, i)
					rec := &Record{Tenant: "a", Response: &wire.Response{ID: id, Object: "response", Status: wire.StatusInProgress, Output: []wire.Item{}}}
					err := st.PutResponse(ctx, rec, false)
					if err == nil {
						err = st.AppendEvent(ctx, id, 0, []byte(`{}`))
					}
					if err == nil {
						_, err = st.GetResponse(ctx, "a", id)
					}
					if err == nil {
						_, err = st.Events(ctx, id, -1)
					}
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							t.Errorf("round %d: after Close: %v, want ErrClosed", round, err)
						}
						return
					}
				}
			}()
		}
		close(start)
		time.Sleep(10 * time.Millisecond)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if err := st.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

// TestItemLocatorsByTenant: an item id one tenant reuses does not move
// another tenant's item.
func TestItemLocatorsByTenant(t *testing.T) {
	eng := &fakeEngine{}
	svc, st := newTestService(t, eng)
	ctx := t.Context()
	create := func(tenant, body string) *wire.Response {
		t.Helper()
		resp, err := svc.Create(ctx, tenant, mustDecode(t, body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	withItem := func(text string) string {
		return fmt.Sprintf(`{"model":"m","input":[{"type":"message","id":"msg_chosen","role":"user","content":%q}]}`, text)
	}
	a := create("a", withItem("a's secret"))
	create("b", withItem("b's text"))
	for tenant, want := range map[string]string{"a": "a's secret", "b": "b's text"} {
		it, _, err := st.GetItem(ctx, tenant, "msg_chosen")
		if err != nil || it.Text() != want {
			t.Errorf("tenant %s reads %q (%v), want %q", tenant, it.Text(), err, want)
		}
	}
	create("a", `{"model":"m","input":[{"type":"item_reference","id":"msg_chosen"}]}`)
	reqs := eng.requests()
	if got := *reqs[len(reqs)-1].Messages[0].Content; got != "a's secret" {
		t.Errorf("a's item_reference resolved to %q", got)
	}
	// Paging after the item still works for its owner.
	l, err := svc.InputItems(ctx, "a", a.ID, ListOptions{After: "msg_chosen", Order: "asc"})
	if err != nil || len(l.Data) != 0 {
		t.Errorf("paging after a's item: %+v %v", l, err)
	}
	if _, err := svc.InputItems(ctx, "b", a.ID, ListOptions{After: "msg_chosen"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("b pages a's response: %v", err)
	}
}
