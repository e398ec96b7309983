package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// errRefused stands for Redis refusing connections.
var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// errOutage is what the state store returns while it is down.
var errOutage = fmt.Errorf("%w: %w", state.ErrUnavailable, errRefused)

// newDownService starts a service on a fresh store whose namespace takes
// the faults arm sets once the service has started (its seal key kept).
func newDownService(t *testing.T, arm func(*faultyNamespace)) (*Service, *fakeEngine) {
	t.Helper()
	st := openStore(t, t.TempDir())
	ns := faulty(st.Namespace())
	eng := &fakeEngine{}
	svc := New(NewStore(ns, StoreOptions{}), eng, Config{CollectInterval: -1})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	arm(ns)
	return svc, eng
}

// wantStoreUnavailable checks err is the 503 of a store outage.
func wantStoreUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "store_unavailable" ||
		ae.Header.Get("Retry-After") == "" || !errors.Is(err, ErrUnavailable) || !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("%s: %#v, want a 503 store_unavailable with Retry-After", what, err)
	}
}

// TestCreateWhileStoreDown (issue 32): while the store is down, a
// response that is to be stored is refused with a 503 before the engine
// is asked; one that is not (store: false) runs.
func TestCreateWhileStoreDown(t *testing.T) {
	svc, eng := newDownService(t, func(ns *faultyNamespace) { ns.down.Store(true) })
	for _, tc := range []struct{ name, body string }{
		{"stored", `{"model":"m","input":"hi"}`},
		{"streamed", `{"model":"m","input":"hi","stream":true}`},
		{"background", `{"model":"m","input":"hi","background":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []string
			sink := SinkFunc(func(typ string, _ []byte) error { events = append(events, typ); return nil })
			resp, err := svc.Create(t.Context(), "a", mustDecode(t, tc.body), http.Header{}, sink)
			wantStoreUnavailable(t, "create", err)
			if resp != nil || len(events) > 0 {
				t.Errorf("a refused create answered %+v and sent %v", resp, events)
			}
		})
	}
	if n := len(eng.bodies); n != 0 {
		t.Errorf("the engine was asked %d times while the store was down", n)
	}
	resp, err := svc.Create(t.Context(), "a", mustDecode(t, `{"model":"m","input":"hi","store":false}`), http.Header{}, nil)
	if err != nil || resp.Status != wire.StatusCompleted {
		t.Fatalf("store false while the store is down: %+v, %v", resp, err)
	}
}

// TestCreateStoreFailsAtEnd (issue 32): a response the store fails to
// keep once the engine has answered is never answered as a response:
// without a stream Create returns the store's error; a stream ends with
// an error event, which the SDKs raise, instead of its end.
func TestCreateStoreFailsAtEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		syncErr error
		status  int
		code    string
	}{
		{"outage", errOutage, http.StatusServiceUnavailable, "store_unavailable"},
		{"other", errors.New("disk full"), http.StatusInternalServerError, "server_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, _ := newDownService(t, func(ns *faultyNamespace) { ns.failSyncs(tc.syncErr) })
			resp, err := svc.Create(t.Context(), "a", mustDecode(t, `{"model":"m","input":"hi"}`), http.Header{}, nil)
			var ae *apierror.Error
			if resp != nil || !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
				t.Fatalf("not streamed: %+v, %#v; want a %d %s", resp, err, tc.status, tc.code)
			}

			type event struct {
				typ  string
				data []byte
			}
			var events []event
			sink := SinkFunc(func(typ string, data []byte) error { events = append(events, event{typ, data}); return nil })
			resp, err = svc.Create(t.Context(), "a", mustDecode(t, `{"model":"m","input":"hi","stream":true}`), http.Header{}, sink)
			if err != nil {
				t.Fatalf("streamed: %v, want the failure in the stream", err)
			}
			last := events[len(events)-1]
			for _, ev := range events {
				if terminalEvent(wire.StatusCompleted) == ev.typ {
					t.Errorf("a response that was not stored was announced %s", ev.typ)
				}
			}
			var got struct {
				Type           string `json:"type"`
				SequenceNumber int    `json:"sequence_number"`
				Code           string `json:"code"`
				Message        string `json:"message"`
				Error          struct {
					Type, Code, Message string
				} `json:"error"`
			}
			if err := json.Unmarshal(last.data, &got); err != nil {
				t.Fatal(err)
			}
			if last.typ != "error" || got.Type != "error" || got.Code != tc.code || got.Message == "" ||
				got.Error.Code != tc.code || got.Error.Type != apierror.TypeServer || got.SequenceNumber != len(events)-1 {
				t.Errorf("last event %s %s; want an error event %s numbered %d", last.typ, last.data, tc.code, len(events)-1)
			}
			if resp.Status != wire.StatusFailed || resp.Error == nil || resp.Error.Code != tc.code {
				t.Errorf("the response returned: %s %+v", resp.Status, resp.Error)
			}
		})
	}
}
