package kv

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

func TestCollectorExportsIndexState(t *testing.T) {
	ix := NewIndex(IndexOptions{})
	ix.SetCapacity(0, 100)
	ix.SetCapacity(1, 50)
	ix.Record(0, HBM, []BlockHash{1, 2, 3})
	ix.SetStale(1, true)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(ix, []string{"a:8000", "b:8000"}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		expfmt.MetricFamilyToText(&b, f)
	}
	for _, want := range []string{
		`turnpike_kv_index_endpoint_blocks{endpoint="a:8000",tier="hbm"} 3`,
		`turnpike_kv_index_endpoint_capacity_blocks{endpoint="b:8000",tier="hbm"} 50`,
		`turnpike_kv_index_endpoint_stale{endpoint="b:8000"} 1`,
		`turnpike_kv_index_endpoint_stale{endpoint="a:8000"} 0`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %s in\n%s", want, b.String())
		}
	}
}
