package api_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
)

// The API is tested through the gateway that mounts it, whose middleware
// names the tenant and whose error handler writes the OpenAI-shaped
// errors: gatewaytest's stack with a gateway in front.

const testModel = gatewaytest.TestModel

// mount is the gateway of the tests' stacks.
var mount = mountWith(nil)

// mountWith is mount with the gateway's options edited by edit.
func mountWith(edit func(*gateway.Options)) gatewaytest.Mount {
	return func(t testing.TB, p gatewaytest.Parts) http.Handler {
		t.Helper()
		opts := gateway.Options{Registry: p.Registry, Dispatch: p.Dispatch, Logger: p.Logger, BodyLimit: 1 << 20, Responses: p.Service}
		if edit != nil {
			edit(&opts)
		}
		s, err := gateway.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s.Handler()
	}
}

// counter is the value of the counter name{label="value"} in reg, 0 when
// it has none.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == name })
	if i < 0 {
		return 0
	}
	labelled := func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }
	for _, m := range mfs[i].GetMetric() {
		if slices.ContainsFunc(m.GetLabel(), labelled) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
