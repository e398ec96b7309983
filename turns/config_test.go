package turns

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/pools"
)

func TestSampleConfigLoads(t *testing.T) {
	data, err := os.ReadFile("testdata/flowcontrol.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	c, err := New(cfg, withoutTicker())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	fc := c.Config()
	if fc.Bands.Interactive.TTL != 15*time.Second || fc.Bands.Background.TTL != 10*time.Minute || fc.MaxInFlightPerEndpoint != 96 || fc.InteractiveReservedPerEndpoint != 8 {
		t.Errorf("sample not applied: %+v", fc)
	}
	if fc.Bands.Standard.MaxQueued != DefaultStandardMaxQueued {
		t.Errorf("standard maxQueued = %d, want the default", fc.Bands.Standard.MaxQueued)
	}
	lab := c.Tenant("batch-lab")
	if lab.DefaultBand != Background || lab.MaxBand != Standard || lab.Weight != 1 {
		t.Errorf("batch-lab = %+v", lab)
	}
	if got := Classify(lab, Hints{Priority: "interactive"}); got != Standard {
		t.Errorf("batch-lab asking for interactive got %v", got)
	}
	if u := c.Tenant("unknown"); u.Weight != DefaultTenantWeight || u.DefaultBand != Standard || u.MaxBand != Interactive {
		t.Errorf("unknown tenant = %+v", u)
	}

	// The section round-trips through JSON for the admin API.
	js, err := json.Marshal(fc)
	if err != nil {
		t.Fatal(err)
	}
	var back FlowControl
	if err := json.Unmarshal(js, &back); err != nil || back != fc {
		t.Errorf("JSON round trip: %v\n got %+v\nwant %+v", err, back, fc)
	}
}

func TestFlowControlEnsureDefaultsIsValid(t *testing.T) {
	var fc FlowControl
	fc.EnsureDefaults()
	if err := fc.Validate(); err != nil {
		t.Fatal(err)
	}
	again := fc
	again.EnsureDefaults()
	if again != fc {
		t.Fatal("EnsureDefaults is not idempotent")
	}
	none := FlowControl{Bands: BandsConfig{Standard: BandConfig{MinShare: -1}}}
	none.EnsureDefaults()
	if none.Bands.Standard.MinShare != -1 {
		t.Errorf("negative minShare replaced by %g", none.Bands.Standard.MinShare)
	}
	noHeld := FlowControl{Bands: BandsConfig{Background: BandConfig{HeldPerEndpoint: -1}}}
	noHeld.EnsureDefaults()
	if got := noHeld.heldLimit(Background, 4); got >= 0 {
		t.Errorf("negative heldPerEndpoint: limit %d, want none", got)
	}
	if got := fc.heldLimit(Background, 4); got != 4*DefaultBackgroundHeldPerEndpoint {
		t.Errorf("default background held limit over 4 endpoints: %d", got)
	}
	if got := fc.heldLimit(Standard, 4); got >= 0 {
		t.Errorf("standard held limit %d, want none by default", got)
	}
	noReserve := FlowControl{InteractiveReservedPerEndpoint: -1}
	noReserve.EnsureDefaults()
	if err := noReserve.Validate(); err != nil || noReserve.interactiveReserve() != 0 {
		t.Errorf("negative reserve: %v, reserve %d, want valid and none", err, noReserve.interactiveReserve())
	}
}

func TestFlowControlValidateReportsEverything(t *testing.T) {
	fc := FlowControl{
		Bands:      BandsConfig{Standard: BandConfig{TTL: -time.Second, MinShare: 0.7}},
		Saturation: SaturationConfig{KVUtilization: 1.5, QueueDepthPerEndpoint: -1},
		Shed:       ShedCurve{Start: 0.9, Full: 0.5},
		HoldAt:     2,
		// A reserve of every slot would leave agent turns none.
		MaxInFlightPerEndpoint:         8,
		InteractiveReservedPerEndpoint: 8,
		LowerBandQueueDepth:            -2,
	}
	fc.Bands.Interactive.HeldPerEndpoint = 3
	fc.EnsureDefaults()
	err := fc.Validate()
	for _, want := range []string{
		"bands.standard.ttl", "bands.standard.minShare", "saturation.kvUtilization",
		"saturation.queueDepthPerEndpoint", "shed.full", "holdAt", "interactiveReservedPerEndpoint",
		"lowerBandQueueDepth", "bands.interactive.heldPerEndpoint",
	} {
		if err == nil || !strings.Contains(err.Error(), "flowControl."+want+":") {
			t.Errorf("missing %s in %v", want, err)
		}
	}
	if _, nerr := New(Config{FlowControl: fc}); nerr == nil {
		t.Error("New accepted an invalid config")
	}
}

func TestValidateTenants(t *testing.T) {
	ts := []Tenant{{Name: "a"}, {Name: "a"}, {Name: "", Weight: -1}, {Name: "q", MaxBand: 7, Quota: Quota{Concurrent: -1}}}
	for i := range ts {
		ts[i].EnsureDefaults()
	}
	err := ValidateTenants(ts)
	for _, want := range []string{`tenants[1].name: duplicate tenant "a"`, "tenants[2].name: required", "tenants[2].weight", "tenants[3].maxBand", "tenants[3].quota.concurrent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	c, _ := newTestController(t, Config{})
	if err := c.SetTenants(ts); err == nil {
		t.Error("SetTenants accepted invalid tenants")
	}
	if err := c.SetConfig(FlowControl{HoldAt: 3}); err == nil {
		t.Error("SetConfig accepted holdAt 3")
	}
}

func TestShedErrorClass(t *testing.T) {
	var err error = shed(ReasonQueueFull, time.Second)
	if !errors.Is(err, ErrShed) {
		t.Fatal("a ShedError is not ErrShed")
	}
	for reason, status := range map[string]int{
		ReasonSaturated: 503, ReasonOverShare: 429, ReasonQuotaRPM: 429, ReasonQuotaTPM: 429,
		ReasonQuotaConcurrency: 429, ReasonQueueFull: 503, ReasonTTLExpired: 408,
		ReasonNoEndpoints: 503, ReasonShuttingDown: 503, ReasonBandHeld: 503,
	} {
		if got := statusOf(reason); got != status {
			t.Errorf("%s: status %d, want %d", reason, got, status)
		}
	}
}

// TestValidateNamesFields: each problem is a pools.FieldError with the
// field's whole path and the problem alone, which the admin API answers
// with.
func TestValidateNamesFields(t *testing.T) {
	fc := FlowControl{Shed: ShedCurve{Start: 0.9, Full: 0.5}, HoldAt: 2}
	fc.EnsureDefaults()
	fes := pools.FieldErrors(fc.Validate())
	if len(fes) != 2 || fes[0].Field != "flowControl.shed.full" || fes[0].Message != "0.5 is not in (start, 1]" || fes[1].Field != "flowControl.holdAt" {
		t.Errorf("flowControl: %+v", fes)
	}
	ts := []Tenant{{Name: "a", Weight: -1}}
	ts[0].EnsureDefaults()
	fes = pools.FieldErrors(ValidateTenants(ts))
	if len(fes) != 1 || fes[0].Field != "tenants[0].weight" || fes[0].Message != "-1 is not positive" {
		t.Errorf("tenants: %+v", fes)
	}
}
