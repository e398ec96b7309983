package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestEndpointCache: GET /endpoints shows each endpoint's account of
// predicted against delivered cached tokens, and none where routing kept
// none.
func TestEndpointCache(t *testing.T) {
	fleet, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "gpu", ServedModels: []string{"m"},
		Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:8001"}, {URL: "http://127.0.0.1:8002"}},
	}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := fleet.Endpoints()[0]
	svc, err := admin.New(context.Background(), admin.Deps{
		Store: memKV(t), Keys: &keyring{}, Registry: fleet,
		CacheAccuracy: func(ep *pools.Endpoint) (admin.EndpointCache, bool) {
			if ep != first {
				return admin.EndpointCache{}, false
			}
			return admin.EndpointCache{Turns: 3, PredictedTokens: 4096, DeliveredTokens: 2048, Misses: map[string]int64{"evicted": 1}}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	svc.Register(e.Group("/admin/v1"))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/v1/endpoints", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var list struct {
		Data []admin.Endpoint `json:"data"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Data) != 2 {
		t.Fatalf("%d endpoints, want 2", len(list.Data))
	}
	for _, ep := range list.Data {
		switch {
		case ep.ID == first.ID && (ep.Cache == nil || ep.Cache.Turns != 3 || ep.Cache.PredictedTokens != 4096 || ep.Cache.DeliveredTokens != 2048 || ep.Cache.Misses["evicted"] != 1):
			t.Errorf("%s: cache %+v", ep.ID, ep.Cache)
		case ep.ID != first.ID && ep.Cache != nil:
			t.Errorf("%s: cache %+v, want none", ep.ID, ep.Cache)
		}
	}
}
