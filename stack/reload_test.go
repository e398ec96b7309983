package stack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnpike-gateway/turnpike/admin"
)

const reloadAdminToken = "reload-test-admin"

// reloadConfig is a config file of one static pool of engines, a routing
// policy and the standard band's TTL; extra is appended as it is.
func reloadConfig(engines []*countingEngine, policy, standardTTL, extra string) string {
	var eps strings.Builder
	for _, e := range engines {
		fmt.Fprintf(&eps, "      - url: http://%s:%s\n", e.host, e.port)
	}
	return fmt.Sprintf(`apiVersion: turnpike/v1
addr: 127.0.0.1:0
adminToken: %s
fleet: {scrapeInterval: 50ms}
pools:
  - name: p
    servedModels: [m]
    endpoints:
%srouting:
  policy: %s
flowControl:
  bands:
    standard: {ttl: %s}
%s`, reloadAdminToken, eps.String(), policy, standardTTL, extra)
}

// adminConfig is GET /admin/v1/config.
func adminConfig(t *testing.T, addr string) admin.ConfigStatus {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+reloadAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st admin.ConfigStatus
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /admin/v1/config: %d %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// section is the value at a path of keys in a config as the admin API
// shows it.
func section(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, _ := v.(map[string]any)
		v = mm[k]
	}
	return v
}

// TestReloadUnderLoad (issue 34): under agent load, a reload (as SIGHUP
// asks) puts a new routing policy, a band's TTL and a pool's new engine in
// force, and no turn fails; a file with several problems is refused with
// every one of them listed, by the admin API too, and the running config
// kept; a setting that needs a restart is named and kept; a file of an
// unknown apiVersion is refused.
func TestReloadUnderLoad(t *testing.T) {
	const model = "m"
	e := make([]*countingEngine, 3)
	for i := range e {
		e[i] = startCountingEngine(t, model)
	}
	path := filepath.Join(t.TempDir(), "turnpike.yaml")
	write := func(body string) {
		t.Helper()
		// Replaced whole, as an editor or a ConfigMap does.
		if err := os.WriteFile(path+".tmp", []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(e[:2], "round-robin", "1m", ""))
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	dataDir := func(c *Config) { c.DataDir = cfg.DataDir }
	st, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), ConfigPath: path, Adjust: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	addr := st.Addr()
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	if got := section(adminConfig(t, addr).Config, "routing", "policy"); got != "round-robin" {
		t.Fatalf("running policy %v, want round-robin", got)
	}
	done, stopAgents := runAgents(client, model, 8)
	progress := func(what string, n int64) {
		t.Helper()
		want := done.Load() + n
		eventually(t, what, func() bool { return done.Load() >= want })
	}
	progress("turns before the reload", 40)

	// Policy, TTL and a third engine, by the entry point SIGHUP calls.
	write(reloadConfig(e, "cache-aware", "45s", ""))
	res := st.Reload(t.Context(), TriggerSignal)
	if res.Result != admin.ReloadSuccess || len(res.NeedsRestart) > 0 {
		t.Fatalf("reload: %+v", res)
	}
	if got := st.reload.policy.Name(); got != "cache-aware" {
		t.Fatalf("policy in force after the reload: %s", got)
	}
	if fc, _, _ := st.reload.adm.FlowControl(); fc.Bands.Standard.TTL != 45*time.Second {
		t.Fatalf("standard band's TTL after the reload: %v", fc.Bands.Standard.TTL)
	}
	shown := adminConfig(t, addr)
	if section(shown.Config, "routing", "policy") != "cache-aware" || section(shown.Config, "flowControl", "bands", "standard", "ttl") != "45s" ||
		section(shown.Config, "adminToken") != redactedValue || shown.LastReload == nil || shown.LastReload.Result != admin.ReloadSuccess {
		t.Fatalf("GET /admin/v1/config after the reload: %+v", shown)
	}
	eventually(t, "the engine added by the reload to take turns", func() bool { return e[2].turns.Load() > 0 })
	progress("turns after the reload", 80)

	// Every problem of a bad file, and the running config kept.
	write(reloadConfig(e, "nope", "-1s", "bodyLimit: -1\n"))
	res = st.Reload(t.Context(), TriggerSignal)
	shown = adminConfig(t, addr)
	for _, want := range []string{"policy", "ttl", "bodyLimit"} {
		if !slices.ContainsFunc(shown.LastReload.Problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem naming %s among %q", want, shown.LastReload.Problems)
		}
	}
	if res.Result != admin.ReloadFailure || shown.LastReload.Result != admin.ReloadFailure || len(shown.LastReload.Problems) < 3 ||
		section(shown.Config, "routing", "policy") != "cache-aware" || st.reload.policy.Name() != "cache-aware" {
		t.Fatalf("a bad file: reload %+v; shown %+v", res, shown)
	}
	progress("turns after the bad file", 40)

	// What needs a restart is named and kept; the rest applies.
	write(reloadConfig(e, "least-loaded", "45s", "bodyLimit: 1048576\n"))
	res = st.Reload(t.Context(), TriggerSignal)
	if res.Result != admin.ReloadSuccess || !slices.Equal(res.NeedsRestart, []string{"bodyLimit"}) || st.reload.policy.Name() != "least-loaded" {
		t.Fatalf("a change needing a restart: %+v, policy %s", res, st.reload.policy.Name())
	}

	// Model rewrites reload: an alias added is resolved by the next turn.
	write(reloadConfig(e, "least-loaded", "45s", "bodyLimit: 1048576\nmodels: {aliases: {gpt-4.1: m}}\n"))
	if res = st.Reload(t.Context(), TriggerSignal); res.Result != admin.ReloadSuccess {
		t.Fatalf("an alias added: %+v", res)
	}
	aliased, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxTokens: openai.Int(4)})
	if err != nil || aliased.Model != model {
		t.Fatalf("a turn to the alias reloaded: %v", err)
	}

	// An unknown apiVersion is refused, whatever else the file says.
	write(strings.Replace(reloadConfig(e, "round-robin", "45s", ""), "turnpike/v1", "turnpike/v9", 1))
	res = st.Reload(t.Context(), TriggerSignal)
	if res.Result != admin.ReloadFailure || len(res.Problems) != 1 || !strings.Contains(res.Problems[0], `apiVersion "turnpike/v9"`) || st.reload.policy.Name() != "least-loaded" {
		t.Fatalf("an unknown apiVersion: %+v", res)
	}
	progress("turns after the refused version", 40)

	if failures := stopAgents(); len(failures) > 0 {
		t.Fatalf("%d of %d turns failed across the reloads; first: %v", len(failures), done.Load()+int64(len(failures)), failures[0])
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var failed, succeeded bool
	for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
		// Two bad files, each refused by Reload and perhaps by the watch.
		var n int
		_, err := fmt.Sscanf(sc.Text(), `turnpike_config_reloads_total{result="failure"} %d`, &n)
		failed = failed || err == nil && n >= 2
		succeeded = succeeded || strings.HasPrefix(sc.Text(), `turnpike_config_reloads_total{result="success"} `) && !strings.HasSuffix(sc.Text(), " 0")
	}
	if !failed || !succeeded {
		t.Errorf("turnpike_config_reloads_total: failures counted %v, success counted %v", failed, succeeded)
	}
}
