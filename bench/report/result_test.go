package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
)

// A Result holds every field of the driver's, in the same order and
// under the same JSON name, and ResultOf copies each: a run's JSON is the
// driver's with a verdict added.
func TestResultOfKeepsEveryField(t *testing.T) {
	dt, rt := reflect.TypeFor[driver.Result](), reflect.TypeFor[Result]()
	last := -1
	for i := range dt.NumField() {
		df := dt.Field(i)
		rf, ok := rt.FieldByName(df.Name)
		switch {
		case !ok:
			t.Errorf("Result lacks driver.Result's %s", df.Name)
		case rf.Type != df.Type || rf.Tag != df.Tag:
			t.Errorf("%s: %v %q, driver.Result's %v %q", df.Name, rf.Type, rf.Tag, df.Type, df.Tag)
		case rf.Index[0] < last:
			t.Errorf("%s out of driver.Result's order", df.Name)
		default:
			last = rf.Index[0]
		}
	}

	r := &driver.Result{Workload: "agentic", API: "responses", Started: time.Unix(1, 0).UTC(), DurationSeconds: 2,
		ByTenant: map[string]*driver.Summary{"t0": {Requests: 1}}, ByBand: map[string]*driver.Summary{"unset": {Requests: 1}},
		Engines: &scrape.EngineCache{Engines: 1}, CachePrediction: &scrape.CachePrediction{Turns: 1}, Ideal: &driver.IdealReuse{Method: "workload"}, Occupancy: &scrape.Occupancy{},
		Cost: &driver.CostReport{}, Interference: &driver.InterferenceReport{}, BatchLoad: &driver.BatchLoadReport{}, Samples: []driver.Sample{{Turn: 1}}}
	r.Total.Requests = 1
	for i := range dt.NumField() {
		if reflect.ValueOf(r).Elem().Field(i).IsZero() && dt.Field(i).Name != "Config" && dt.Field(i).Name != "CDF" && dt.Field(i).Name != "Timeline" {
			t.Errorf("the test leaves driver.Result's %s zero", dt.Field(i).Name)
		}
	}
	want, _ := json.Marshal(r)
	got, _ := json.Marshal(ResultOf(r))
	if !bytes.Equal(got, want) {
		t.Errorf("ResultOf marshals as\n%s\nwant\n%s", got, want)
	}
}
