package pools

import (
	"strings"
	"testing"
)

func TestRoles(t *testing.T) {
	pool := func(name, role, url string, models ...string) PoolConfig {
		return PoolConfig{Name: name, Role: role, ServedModels: models, Endpoints: []EndpointConfig{{URL: url}}}
	}
	r, err := NewRegistry([]PoolConfig{
		pool("prefill", RolePrefill, "http://p:8000", "m"),
		pool("decode", RoleDecode, "http://d:8000", "m"),
		pool("whole", "", "http://w:8000", "m", "other"),
	}, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(eps []*Endpoint) string {
		var s []string
		for _, ep := range eps {
			s = append(s, ep.ID)
		}
		return strings.Join(s, ",")
	}
	if got := ids(r.EndpointsFor(nil, "m")); got != "d:8000,w:8000" {
		t.Errorf("EndpointsFor = %s, want the decode and whole endpoints", got)
	}
	if got := ids(r.PrefillEndpointsFor(nil, "m")); got != "p:8000" {
		t.Errorf("PrefillEndpointsFor = %s", got)
	}
	if !r.Disaggregated("m") || r.Disaggregated("other") {
		t.Errorf("Disaggregated: m %v, other %v", r.Disaggregated("m"), r.Disaggregated("other"))
	}

	err = ValidatePools([]PoolConfig{pool("prefill", RolePrefill, "http://p:8000", "m"), pool("x", "sideways", "http://x:8000", "n")})
	for _, want := range []string{`pools[0].role: prefill pool "prefill" serves "m", which no decode or both pool serves`, `pools[1].role: "sideways"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidatePools: %v, want %q", err, want)
		}
	}
}
