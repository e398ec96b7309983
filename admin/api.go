package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Register mounts the admin routes on g, which the gateway creates at
// /admin/v1 behind its admin-token middleware.
func (s *Service) Register(g *echo.Group) {
	r := func(method, path string, h func(echo.Context) error) { g.Add(method, path, s.handle(h)) }
	r(http.MethodGet, "/tenants", s.listTenants)
	r(http.MethodPost, "/tenants", s.createTenant)
	r(http.MethodGet, "/tenants/:tenant", s.getTenant)
	r(http.MethodPatch, "/tenants/:tenant", s.updateTenant)
	r(http.MethodDelete, "/tenants/:tenant", s.deleteTenant)
	r(http.MethodGet, "/tenants/:tenant/keys", s.listKeys)
	r(http.MethodPost, "/tenants/:tenant/keys", s.createKey)
	r(http.MethodDelete, "/tenants/:tenant/keys/:key", s.revokeKey)
	r(http.MethodGet, "/tenants/:tenant/sessions/:session", s.getSession)
	r(http.MethodPost, "/tenants/:tenant/sessions/:session/unpin", s.unpinSession)
	r(http.MethodGet, "/config", s.getConfig)
	r(http.MethodGet, "/flowcontrol", s.getFlowControl)
	r(http.MethodPut, "/flowcontrol", s.putFlowControl)
	r(http.MethodDelete, "/flowcontrol", s.deleteFlowControl)
	r(http.MethodGet, "/bands", s.getBands)
	r(http.MethodPut, "/bands", s.putBands)
	r(http.MethodGet, "/pools", s.listPools)
	r(http.MethodGet, "/pools/:name", s.getPool)
	r(http.MethodPost, "/pools/:name/lend", s.lendPool)
	r(http.MethodPost, "/pools/:name/reclaim", s.reclaimPool)
	r(http.MethodGet, "/endpoints", s.listEndpoints)
	r(http.MethodGet, "/endpoints/:id", s.getEndpoint)
	r(http.MethodPost, "/endpoints/:id/drain", s.drain)
	r(http.MethodPost, "/endpoints/:id/undrain", s.undrain)
	r(http.MethodGet, "/models/:model/revisions", s.getRevisions)
	r(http.MethodPut, "/models/:model/revisions", s.putRevisions)
	r(http.MethodDelete, "/models/:model/revisions", s.deleteRevisions)
}

// handle turns a handler's error of any class into an *apierror.Error,
// which the server's one error handler writes as it is.
func (s *Service) handle(h func(echo.Context) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := h(c)
		if err == nil || c.Response().Committed {
			return err
		}
		e := asError(err)
		if e.Status >= 500 && e.Status != http.StatusNotImplemented {
			s.log.Error("admin: request failed", "method", c.Request().Method, "path", c.Path(), "err", err)
		}
		return e
	}
}

// list is the OpenAI list envelope.
type list[T any] struct {
	Object string `json:"object"`
	Data   []T    `json:"data"`
}

func listOf[T any](data []T) list[T] {
	if data == nil {
		data = []T{}
	}
	return list[T]{Object: "list", Data: data}
}

// deleted answers a DELETE.
type deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// param is a path parameter, unescaped: Echo routes on the raw path when
// the request escapes characters, and session keys may need to.
func param(c echo.Context, name string) string {
	v := c.Param(name)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}

// decodeJSON decodes body into v strictly: an unknown field is a 400
// naming it, because a misspelt field silently ignored is a surprise later.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidf("", "The request body is empty; send a JSON object.")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f = strings.Trim(f, `"`)
			return invalidf(f, "Unknown field %q.", f)
		}
		if !errors.As(err, new(*json.SyntaxError)) && !errors.As(err, new(*json.UnmarshalTypeError)) {
			return invalidf("", "The body could not be decoded: %v.", err)
		}
		return err
	}
	return nil
}

func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		// Over the gateway's body limit, or the client went away.
		return nil, apierror.New(http.StatusRequestEntityTooLarge, "request_too_large", "Request body is too large.").WithClass(ErrInvalid)
	}
	return b, nil
}

func (s *Service) listTenants(c echo.Context) error {
	return c.JSON(http.StatusOK, listOf(s.Tenants()))
}

func (s *Service) createTenant(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var t turns.Tenant
	if err := decodeJSON(body, &t); err != nil {
		return err
	}
	out, err := s.CreateTenant(c.Request().Context(), t)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, out)
}

func (s *Service) getTenant(c echo.Context) error {
	t, err := s.Tenant(param(c, "tenant"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

// updateTenant merges the body into the tenant: fields it leaves out keep
// their values.
func (s *Service) updateTenant(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	out, err := s.UpdateTenant(c.Request().Context(), param(c, "tenant"), func(t *turns.Tenant) error {
		return decodeJSON(body, t)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Service) deleteTenant(c echo.Context) error {
	name := param(c, "tenant")
	if err := s.DeleteTenant(c.Request().Context(), name); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deleted{ID: name, Object: "tenant.deleted", Deleted: true})
}

func (s *Service) listKeys(c echo.Context) error {
	ks, err := s.Keys(param(c, "tenant"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(ks))
}

// createdKey is the one answer that carries a key's secret.
type createdKey struct {
	APIKey
	Secret string `json:"secret"`
}

func (s *Service) createKey(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var req struct {
		Name string `json:"name"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return err
		}
	}
	k, secret, err := s.CreateKey(c.Request().Context(), param(c, "tenant"), req.Name)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, createdKey{k, secret})
}

func (s *Service) revokeKey(c echo.Context) error {
	id := param(c, "key")
	if err := s.RevokeKey(c.Request().Context(), param(c, "tenant"), id); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deleted{ID: id, Object: "api_key.deleted", Deleted: true})
}

// flowControlDoc is flowControl on the wire. Its body is the config
// file's flowControl section as JSON, durations included as Go duration
// strings ("30s"), so that what an operator writes in the file and sends
// here is the same.
type flowControlDoc struct {
	// Source is "config" or "api": where the flowControl in force came from.
	Source string `json:"source"`
	// FlowControl is the section, defaults filled.
	FlowControl any `json:"flowControl"`
}

func (s *Service) getFlowControl(c echo.Context) error {
	fc, override, err := s.FlowControl()
	if err != nil {
		return err
	}
	return s.writeYAMLAsJSON(c, override, fc)
}

func (s *Service) putFlowControl(c echo.Context) error {
	var fc turns.FlowControl
	if err := decodeDurations(c, &fc); err != nil {
		return err
	}
	if err := s.SetFlowControl(c.Request().Context(), fc); err != nil {
		return err
	}
	return s.getFlowControl(c)
}

func (s *Service) deleteFlowControl(c echo.Context) error {
	if err := s.ResetFlowControl(c.Request().Context()); err != nil {
		return err
	}
	return s.getFlowControl(c)
}

func (s *Service) getBands(c echo.Context) error {
	fc, override, err := s.FlowControl()
	if err != nil {
		return err
	}
	return s.writeYAMLAsJSON(c, override, fc.Bands)
}

// putBands replaces flowControl.bands and keeps the rest.
func (s *Service) putBands(c echo.Context) error {
	var bands turns.BandsConfig
	if err := decodeDurations(c, &bands); err != nil {
		return err
	}
	fc, _, err := s.FlowControl()
	if err != nil {
		return err
	}
	fc.Bands = bands
	if err := s.SetFlowControl(c.Request().Context(), fc); err != nil {
		return err
	}
	return s.getBands(c)
}

// decodeDurations decodes a JSON body through the YAML decoder, which
// reads time.Duration fields from duration strings as the config file
// does; encoding/json would want nanoseconds. JSON is YAML, so the body
// is read as sent, and unknown fields are refused.
func decodeDurations(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidf("", "The request body is empty; send a JSON object.")
	}
	dec := yaml.NewDecoder(bytes.NewReader(body))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return invalidf("", "The body could not be decoded: %s.", strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  "), "\n  ", "; "))
	}
	return nil
}

// writeYAMLAsJSON writes v as the config file would spell it (durations
// as strings), in JSON.
func (s *Service) writeYAMLAsJSON(c echo.Context, override bool, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	src := SourceConfig
	if override {
		src = SourceAPI
	}
	return c.JSON(http.StatusOK, flowControlDoc{Source: src, FlowControl: doc})
}

// Pool is a pool as the API shows it.
type Pool struct {
	Name        string   `json:"name"`
	Engine      string   `json:"engine"`
	Role        string   `json:"role"`
	Accelerator string   `json:"accelerator,omitempty"`
	Model       string   `json:"model,omitempty"`
	Models      []string `json:"servedModels"`
	// Lendable pools take traffic only while lent; Lending is their
	// lending state, nil for other pools.
	Lendable bool `json:"lendable"`
	// PriorityScheduling: the engines schedule by request priority
	// (pools.PoolConfig.PriorityScheduling).
	PriorityScheduling bool       `json:"priorityScheduling"`
	Lending            *Lending   `json:"lending,omitempty"`
	Endpoints          []Endpoint `json:"endpoints"`
}

// Endpoint is an endpoint as the API shows it, read live.
type Endpoint struct {
	ID   string `json:"id"`
	Pool string `json:"pool"`
	URL  string `json:"url"`
	// Available is healthy, not draining and breaker not open.
	Available bool `json:"available"`
	Healthy   bool `json:"healthy"`
	Draining  bool `json:"draining"`
	// Breaker is "closed", "half-open" or "open".
	Breaker string `json:"breaker"`
	// InFlight and InFlightTokens are this gateway's requests on the
	// endpoint and their estimated tokens.
	InFlight       int64 `json:"inFlight"`
	InFlightTokens int64 `json:"inFlightTokens"`
	// PeerInFlight and PeerInFlightTokens are the other gateways' on the
	// same fleet, as they last reported them (routing.shareLoad); zero on
	// a gateway alone.
	PeerInFlight       int64        `json:"peerInFlight"`
	PeerInFlightTokens int64        `json:"peerInFlightTokens"`
	Load               EndpointLoad `json:"load"`
	// Cache is how well routing predicted the endpoint's cached tokens;
	// nil when no turn of it was looked up in the KV-cache index.
	Cache *EndpointCache `json:"cache,omitempty"`
}

// EndpointCache is an endpoint's account of the prompt tokens routing
// predicted cached there against those its engine reported cached
// (docs/cache.md), since the routing policy was built (start or reload).
type EndpointCache struct {
	// Turns are the turns answered with usage whose prompt was looked up.
	Turns int64 `json:"turns"`
	// PredictedTokens and DeliveredTokens sum, over Turns, the tokens
	// predicted cached and the engine's cached_tokens.
	PredictedTokens int64 `json:"predictedTokens"`
	DeliveredTokens int64 `json:"deliveredTokens"`
	// Misses counts, by cause (evicted, never_there, another_tier,
	// another_adapter, unknown), the turns whose engine cached fewer tokens
	// than predicted by more than one block.
	Misses map[string]int64 `json:"misses,omitempty"`
}

// EndpointLoad is what the engine last reported of itself.
type EndpointLoad struct {
	Running   int       `json:"running"`
	Waiting   int       `json:"waiting"`
	KVUsage   float64   `json:"kvUsage"`
	ScrapedAt time.Time `json:"scrapedAt,omitzero"`
	// Stale means the last scrape is too old to trust.
	Stale bool `json:"stale"`
}

func (s *Service) endpointView(ep *pools.Endpoint) Endpoint {
	l := ep.Load()
	peers := ep.Peers()
	return Endpoint{
		ID:                 ep.ID,
		Pool:               ep.Pool.Name(),
		URL:                ep.URL.String(),
		Available:          ep.Available(),
		Healthy:            ep.Healthy(),
		Draining:           ep.Draining(),
		Breaker:            ep.BreakerState().String(),
		InFlight:           ep.OwnInFlight(),
		InFlightTokens:     ep.OwnInFlightTokens(),
		PeerInFlight:       peers.InFlight,
		PeerInFlightTokens: peers.InFlightTokens,
		Load: EndpointLoad{
			Running:   l.Running,
			Waiting:   l.Waiting,
			KVUsage:   l.KVUsage,
			ScrapedAt: l.ScrapedAt,
			Stale:     ep.Stale(s.now()),
		},
		Cache: s.endpointCache(ep),
	}
}

func (s *Service) endpointCache(ep *pools.Endpoint) *EndpointCache {
	if s.deps.CacheAccuracy == nil {
		return nil
	}
	if c, ok := s.deps.CacheAccuracy(ep); ok {
		return &c
	}
	return nil
}

func (s *Service) listPools(c echo.Context) error {
	var out []Pool
	if r := s.deps.Registry; r != nil {
		for _, p := range r.Pools {
			out = append(out, s.poolView(p))
		}
	}
	return c.JSON(http.StatusOK, listOf(out))
}

func (s *Service) listEndpoints(c echo.Context) error {
	var out []Endpoint
	if r := s.deps.Registry; r != nil {
		for _, ep := range r.Endpoints() {
			out = append(out, s.endpointView(ep))
		}
	}
	return c.JSON(http.StatusOK, listOf(out))
}

func (s *Service) endpoint(c echo.Context) (*pools.Endpoint, error) {
	id := param(c, "id")
	if s.deps.Registry != nil {
		if ep, ok := s.deps.Registry.Endpoint(id); ok {
			return ep, nil
		}
	}
	return nil, notFoundf("id", "endpoint_not_found", "No endpoint %q.", id)
}

func (s *Service) getEndpoint(c echo.Context) error {
	ep, err := s.endpoint(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.endpointView(ep))
}

// drain stops new requests to the endpoint; those in flight finish, and
// the sessions pinned to it are handed over at once (the registry's
// OnDrain hook: dispatch.Dispatcher.HandOff).
func (s *Service) drain(c echo.Context) error { return s.setDraining(c, true) }

func (s *Service) undrain(c echo.Context) error { return s.setDraining(c, false) }

func (s *Service) setDraining(c echo.Context, d bool) error {
	ep, err := s.endpoint(c)
	if err != nil {
		return err
	}
	if ep.Draining() != d {
		ep.SetDraining(d)
		s.log.Info("admin: endpoint drain changed", "endpoint", ep.ID, "draining", d)
	}
	return c.JSON(http.StatusOK, s.endpointView(ep))
}

// Session is a session as the API shows it.
type Session struct {
	Tenant       string    `json:"tenant"`
	Key          string    `json:"key"`
	Turns        int       `json:"turns"`
	FirstSeen    time.Time `json:"firstSeen"`
	LastSeen     time.Time `json:"lastSeen"`
	LastFinished time.Time `json:"lastFinished,omitzero"`
	// MeanGapSeconds is the moving average of the pause between turns.
	MeanGapSeconds float64 `json:"meanGapSeconds"`
	// Endpoint is the pinned endpoint's ID; empty when unpinned.
	Endpoint     string `json:"endpoint"`
	PrefixBlocks int    `json:"prefixBlocks"`
}

func sessionView(st sessions.State) Session {
	return Session{
		Tenant:         st.Tenant,
		Key:            st.Key,
		Turns:          st.Turns,
		FirstSeen:      st.FirstSeen,
		LastSeen:       st.LastSeen,
		LastFinished:   st.LastFinished,
		MeanGapSeconds: st.MeanGap.Seconds(),
		Endpoint:       st.Endpoint,
		PrefixBlocks:   st.PrefixBlocks,
	}
}

// session finds the session the path names. The tenant need not be one
// the admin API knows: an open gateway's sessions belong to "default".
func (s *Service) session(c echo.Context) (sessions.State, error) {
	if s.deps.Sessions == nil {
		return sessions.State{}, unavailable("a session store")
	}
	tenant, key := param(c, "tenant"), param(c, "session")
	st, ok := s.deps.Sessions.Get(tenant, key, s.now())
	if !ok {
		return st, notFoundf("session", "session_not_found", "Tenant %q has no live session %q.", tenant, key)
	}
	return st, nil
}

func (s *Service) getSession(c echo.Context) error {
	st, err := s.session(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sessionView(st))
}

// unpinSession removes the session's endpoint pin: its next turn is
// routed afresh. The session itself stays.
func (s *Service) unpinSession(c echo.Context) error {
	st, err := s.session(c)
	if err != nil {
		return err
	}
	if _, err := s.deps.Sessions.Unpin(c.Request().Context(), st.Tenant, st.Key, sessions.PinRemoved, s.now()); err != nil {
		return err
	}
	st, err = s.session(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sessionView(st))
}
