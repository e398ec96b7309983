package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/stack"
)

// TestMain lets this test binary stand in for the turnpike binary in the
// children the bench starts (os.Executable): `sim …` and `bench tenant`.
// go test never passes a test binary those arguments.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "sim" || (os.Args[1] == "bench" && len(os.Args) > 2 && os.Args[2] == "tenant")) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			os.Stderr.WriteString("turnpike: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The embedded fleet in processes of its own: every engine serves, with
// its KV events and capacity reported, in the one pool; closing it stops
// the processes.
func TestFleetApart(t *testing.T) {
	var f simFlags
	f.replicas = 3
	f.accelerator, f.model, f.served, f.flavor = defaultSimAccelerator, defaultSimModel, defaultSimServedModel, "vllm"
	f.timeScale, f.scheduling = 0.05, "fcfs"
	sf, err := f.fleet()
	if err != nil {
		t.Fatal(err)
	}
	sf.Apart = []int{1, 2}
	fl := sf.Fleets()
	if err := fl.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	urls := fl.URLs()
	ps := stack.SimPools(fl, sf.TokenizerDir)
	if len(urls) != 3 || len(fl.Processes()) != 2 || len(ps) != 1 || len(ps[0].Endpoints) != 3 {
		t.Fatalf("urls %v, %d processes, pools %+v", urls, len(fl.Processes()), ps)
	}
	if fl.KVCapacityTokens() <= 0 {
		t.Errorf("KV capacity %d", fl.KVCapacityTokens())
	}
	// Each engine is numbered as in one process, so their names, and the
	// ids of their answers, differ.
	ids := map[string]int{}
	for i, ep := range ps[0].Endpoints {
		if ep.URL != urls[i] || !strings.HasPrefix(ep.KVEvents, "tcp://127.0.0.1:") {
			t.Errorf("endpoint %d: %+v", i, ep)
		}
		body := `{"model":"` + defaultSimServedModel + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
		resp, err := http.Post(ep.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(got), `"choices"`) {
			t.Errorf("engine %d answered %d %s", i, resp.StatusCode, got)
		}
		var answer struct{ ID string }
		if err := json.Unmarshal(got, &answer); err != nil {
			t.Fatal(err)
		}
		if j, seen := ids[answer.ID]; seen {
			t.Errorf("engines %d and %d both answered with id %q", j, i, answer.ID)
		}
		ids[answer.ID] = i
	}
	if err := fl.Kill(0); err == nil {
		t.Error("a replica apart can be killed from here")
	}
	done := make(chan error, 1)
	go func() { done <- fl.Close(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the engine processes did not stop")
	}
	for _, cmd := range fl.Processes() {
		if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
			t.Errorf("process %d still runs", cmd.Process.Pid)
		}
	}
}
