package stack

import (
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/responses"
)

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := Load("../turnpike.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Pools) != 5 || len(cfg.Pools[0].Endpoints) != 2 || cfg.Pools[2].Role != "prefill" || cfg.Pools[3].Role != "decode" || !cfg.Pools[4].Lendable {
		t.Fatalf("pools not read: %+v", cfg.Pools)
	}
	if ls := cfg.Pools[4].LendSchedule; ls == nil || len(ls.Windows) != 2 || ls.Timezone != "Europe/Paris" || ls.Grace() != 30*time.Second {
		t.Errorf("lendSchedule not read: %+v", cfg.Pools[4].LendSchedule)
	}
	if cfg.Routing.PD.UncachedTokens != 512 {
		t.Errorf("routing.pd not read: %+v", cfg.Routing.PD)
	}
	if cfg.Pools[0].Endpoints[0].KVEvents != "tcp://127.0.0.1:5557" {
		t.Errorf("kvEvents not read")
	}
	if cfg.Fleet.StaleAfter.String() != "1.5s" {
		t.Errorf("durations not read: staleAfter %v", cfg.Fleet.StaleAfter)
	}
	if cfg.Responses.HostedTools != responses.HostedToolsDrop {
		t.Errorf("responses.hostedTools not read: %q", cfg.Responses.HostedTools)
	}
	if cfg.BodyBudget != 512<<20 {
		t.Errorf("bodyBudget not read: %d", cfg.BodyBudget)
	}
	if cfg.PromptMemoBytes != 64<<20 || cfg.Routing.KVIndexMaxBlocks != 1<<17 {
		t.Errorf("promptMemoBytes, routing.kvIndexMaxBlocks not read: %d, %d", cfg.PromptMemoBytes, cfg.Routing.KVIndexMaxBlocks)
	}
}

// TestExampleDiscoveryLoads: the example config's commented pools of each
// discovery kind, uncommented, are a valid config.
func TestExampleDiscoveryLoads(t *testing.T) {
	b, err := os.ReadFile("../turnpike.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "# Endpoints discovered instead of listed")
	if !ok {
		t.Fatal("no discovery examples in the example config")
	}
	_, block, _ = strings.Cut(block, "\n") // the heading's end
	// The examples run to the end of the comment; in it, a pool's lines
	// are "  #- " and "  #  ", prose is "  # ".
	pools := "pools:\n"
	for line := range strings.Lines(block) {
		rest, ok := strings.CutPrefix(line, "  #")
		if !ok {
			break
		}
		if strings.HasPrefix(rest, "- ") || strings.HasPrefix(rest, "  ") {
			pools += "  " + rest
		}
	}
	cfg, err := Parse([]byte(pools))
	if err != nil {
		t.Fatalf("%v\n%s", err, pools)
	}
	var kinds []string
	for _, pc := range cfg.Pools {
		kinds = append(kinds, pc.Discovery.Kind)
	}
	if want := "file kubernetes kubernetes"; strings.Join(kinds, " ") != want {
		t.Errorf("discovery kinds %v, want %s", kinds, want)
	}
}

// TestConfigValidateReportsEverything: one run of validation names every
// problem, so an operator fixes a config in one pass.
func TestConfigValidateReportsEverything(t *testing.T) {
	_, err := Parse([]byte(`
pools:
  - name: a
    engine: tgi
    accelerator: h900
    servedModels: []
    endpoints:
      - url: ftp://x
  - name: a
    role: sideways
    servedModels: [m]
    endpoints: []
routing:
  policy: psychic
fleet:
  healthFailures: -2
responses:
  hostedTools: ignore
server:
  flushInterval: 2s
`))
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{
		`pools[0].engine`, `pools[0].accelerator`, `pools[0].servedModels`, `pools[0].endpoints[0].url`,
		`pools[1].name: duplicate`, `pools[1].role`, `pools[1].endpoints`, `routing: affinity: unknown policy "psychic"`,
		`fleet.healthFailures`,
		`hostedTools is "ignore"`,
		`server.flushInterval: 2s, want 0 to 1s`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestConfigUnknownKeyRejected(t *testing.T) {
	_, err := Parse([]byte("adrr: 1.2.3.4:80\npools: []\n"))
	if err == nil || !strings.Contains(err.Error(), "adrr") {
		t.Fatalf("misspelt key not reported: %v", err)
	}
}

// FuzzParseConfig reads arbitrary config files: never a crash, and a
// config it accepts validates as served.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("../turnpike.example.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("addr: 127.0.0.1:0\npools: []\n"))
	f.Add([]byte("fleet:\n  healthFailures: -2\nresponses:\n  hostedTools: ignore\n"))
	f.Add([]byte("routing:\n  policy: [1, 2]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted config does not validate: %v", err)
		}
	})
}

// TestStateConfig: the state section picks the store, pebble by default,
// and a wrong one is named field by field.
func TestStateConfig(t *testing.T) {
	const pool = "pools:\n  - name: p\n    servedModels: [m]\n    endpoints:\n      - url: http://127.0.0.1:8001\n"
	for _, c := range []struct {
		name, yaml string
		backend    string   // the backend read, when valid
		errs       []string // substrings of the error, when not
	}{
		{name: "default", yaml: "", backend: "pebble"},
		{name: "pebble", yaml: "state:\n  backend: pebble\n", backend: "pebble"},
		{name: "redis", yaml: "state:\n  backend: redis\n  url: redis://127.0.0.1:6379/0\n  replicas: 1\n  replicaTimeout: 250ms\n", backend: "redis"},
		{name: "redis cluster", yaml: "state:\n  backend: redis\n  url: redis://h1:7000?addr=h2:7000\n", backend: "redis"},
		{name: "unknown backend", yaml: "state:\n  backend: etcd\n", errs: []string{`state.backend: "etcd", want pebble or redis`}},
		{name: "redis without url", yaml: "state:\n  backend: redis\n", errs: []string{"state.url: required for backend redis"}},
		{name: "bad url", yaml: "state:\n  backend: redis\n  url: http://u:secret@h:1\n  replicas: -1\n", errs: []string{`state.url:`, `scheme "http"`, "replicas must not be negative"}},
		{name: "redis fields on pebble", yaml: "state:\n  url: redis://h:1\n  replicas: 2\n", errs: []string{"state.url: only for backend redis", "state.replicas: only for backend redis"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(pool + c.yaml))
			if c.errs == nil {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.State.Backend != c.backend {
					t.Errorf("backend %q, want %q", cfg.State.Backend, c.backend)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range c.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestResponsesSection: the responses section is responses.Config: seal
// keys read from base64, defaults filled, and every bad key and negative
// value reported at once.
func TestResponsesSection(t *testing.T) {
	const pool = "pools:\n  - name: p\n    servedModels: [m]\n    endpoints:\n      - url: http://127.0.0.1:8001\n"
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	cfg, err := Parse([]byte(pool + "responses:\n  sealKeys: [" + key + "]\n  jobPoll: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Responses
	if len(r.SealKeys) != 1 || len(r.SealKeys[0]) != 32 || r.JobPoll != time.Second ||
		r.Retention != responses.DefaultTTL || r.Workers != responses.DefaultWorkers || r.JobLease != responses.DefaultJobLease {
		t.Errorf("responses section read as %+v", r)
	}
	short := base64.StdEncoding.EncodeToString([]byte("short"))
	_, err = Parse([]byte(pool + "responses:\n  sealKeys: [" + key + ", 'not base64!', " + short + "]\n  workers: -1\n"))
	if err == nil {
		t.Fatal("bad seal keys and negative workers accepted")
	}
	for _, want := range []string{"sealKeys[1]", "sealKeys[2]", "must not be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %s:\n%v", want, err)
		}
	}
}

// TestAPIVersion: turnpike/v1 is read; a file without apiVersion is read
// as turnpike/v1 with a warning; any other version is refused, whatever
// else the file says.
func TestAPIVersion(t *testing.T) {
	const rest = "pools: [{name: p, servedModels: [m], endpoints: [{url: 'http://127.0.0.1:9'}]}]\n"
	for _, tc := range []struct {
		name, file string
		err        string
		warnings   int
	}{
		{name: "v1", file: "apiVersion: turnpike/v1\n" + rest},
		{name: "none", file: rest, warnings: 1},
		{name: "unknown", file: "apiVersion: turnpike/v2\nnoSuchKey: 1\n" + rest, err: `apiVersion "turnpike/v2" is not one this gateway reads: want turnpike/v1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.file))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "noSuchKey") {
					t.Fatalf("Parse: %v, want only %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.APIVersion != APIVersionV1 || len(c.Warnings()) != tc.warnings {
				t.Fatalf("apiVersion %q, warnings %q", c.APIVersion, c.Warnings())
			}
		})
	}
}

// docs/memory-1gib.yaml, the memory keys docs/memory.md gives for 1,000
// agents under 1 GiB, decodes (its pools are the reader's) and says what
// the docs say it does.
func TestMemoryConfigDecodes(t *testing.T) {
	b, err := os.ReadFile("../docs/memory-1gib.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routing.KVIndexMaxBlocks != 32768 || cfg.Runtime.MemoryLimit != 900<<20 ||
		cfg.Routing.HandOff.LastPromptBytes != 32<<20 || cfg.Responses.ContextCacheBytes != 32<<20 {
		t.Errorf("memory keys: kvIndexMaxBlocks %d, memoryLimit %d, lastPromptBytes %d, contextCacheBytes %d",
			cfg.Routing.KVIndexMaxBlocks, cfg.Runtime.MemoryLimit, cfg.Routing.HandOff.LastPromptBytes, cfg.Responses.ContextCacheBytes)
	}
}
