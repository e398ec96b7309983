package workload

import (
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// sampleConfig is the bench section as a turnpike config file would hold it.
const sampleConfig = `
workload: agentic
api: chat
rate: 20
request_timeout: 90s
tenant_keys: [sk-a, sk-b]
agentic:
  sessions: 64
  think_time: 2s
  loop_gap: 250ms
  wave_interval: 1
trace:
  time_scale: 0.1
  window_end: 10m
isolation:
  burst_multiple: 3
`

func TestConfigYAML(t *testing.T) {
	var cfg Config
	if err := yaml.Unmarshal([]byte(sampleConfig), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.API != APIChat || cfg.Rate != 20 || cfg.RequestTimeout.D() != 90*time.Second || len(cfg.TenantKeys) != 2 ||
		cfg.Agentic.Sessions != 64 || cfg.Agentic.ThinkTime.D() != 2*time.Second || cfg.Agentic.LoopGap.D() != 250*time.Millisecond ||
		cfg.Agentic.WaveInterval.D() != time.Second || cfg.Trace.TimeScale != 0.1 || cfg.Trace.WindowEnd.D() != 10*time.Minute ||
		cfg.Isolation.BurstMultiple != 3 || cfg.Agentic.TurnsPerSession != DefaultTurnsPerSession {
		t.Errorf("decoded %+v", cfg)
	}
}
