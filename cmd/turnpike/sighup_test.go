package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/admin"
)

// TestServeReloadsOnSIGHUP (issue 34): `turnpike serve --config FILE`
// reloads FILE when the process gets SIGHUP: the routing policy changed
// in the file is in force, and the admin API says the signal did it.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	eng, err := sim.New(sim.Config{ServedModelName: "m", TimeScale: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.Close(); eng.Close() })
	const token = "sighup-admin-token"
	path := filepath.Join(t.TempDir(), "turnpike.yaml")
	write := func(policy string) {
		body := fmt.Sprintf("apiVersion: turnpike/v1\nadminToken: %s\npools:\n  - name: p\n    servedModels: [m]\n    endpoints: [{url: %q}]\nrouting: {policy: %s}\nserver: {shutdownDelay: -1s}\n", token, srv.URL, policy)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("round-robin")

	ctx, cancel := context.WithCancel(t.Context())
	var logged bytes.Buffer
	stderr := &lockedWriter{w: &logged}
	log := func() string {
		stderr.mu.Lock()
		defer stderr.mu.Unlock()
		return logged.String()
	}
	served := make(chan error, 1)
	go func() {
		served <- serveCmd(ctx, []string{"--config", path, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--log-level", "info"}, &bytes.Buffer{}, stderr)
	}()
	t.Cleanup(func() { cancel(); <-served })
	addrRE := regexp.MustCompile(`turnpike serving" addr=http://([0-9.:]+)`)
	var addr string
	waitFor(t, "the gateway to serve", func() bool {
		if m := addrRE.FindStringSubmatch(log()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	status := func() admin.ConfigStatus {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/v1/config", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st admin.ConfigStatus
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	policy := func(st admin.ConfigStatus) any {
		routing, _ := st.Config["routing"].(map[string]any)
		return routing["policy"]
	}
	if p := policy(status()); p != "round-robin" {
		t.Fatalf("policy at start %v", p)
	}

	write("least-loaded")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The file's watch may reload it first; the signal reloads it again.
	waitFor(t, "the reload the signal asked for", func() bool {
		st := status()
		return st.LastReload != nil && st.LastReload.Trigger == "signal" && st.LastReload.Result == admin.ReloadSuccess && policy(st) == "least-loaded"
	})
}

// --model-alias takes NAME=MODEL, repeated; anything else is refused.
func TestModelAliasFlag(t *testing.T) {
	var m modelAliases
	for _, v := range []string{"gpt-4.1=meta-llama/Llama-3.1-8B-Instruct", " gpt-4o = Qwen/Qwen3-32B "} {
		if err := m.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if m["gpt-4.1"] != "meta-llama/Llama-3.1-8B-Instruct" || m["gpt-4o"] != "Qwen/Qwen3-32B" || len(m) != 2 {
		t.Errorf("aliases %v", m)
	}
	for _, bad := range []string{"gpt-4.1", "=m", "a=", ""} {
		if err := m.Set(bad); err == nil {
			t.Errorf("Set(%q) took it", bad)
		}
	}
}
