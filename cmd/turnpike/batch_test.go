package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/stack"
)

// TestEmbeddedBatch: the served gateway takes a batch from the OpenAI SDK
// and runs it on the simulated fleet to an answer for every request.
func TestEmbeddedBatch(t *testing.T) {
	cfg := &stack.Config{}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	sf := simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, timeScale: 0}
	st, err := startStack(t.Context(), cfg, &sim.Topology{Config: sf.config(), Replicas: sf.replicas}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(t.Context()) })
	client := openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	var in strings.Builder
	for i := range 6 {
		fmt.Fprintf(&in, `{"custom_id":"q%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"question %d"}]}}`+"\n", i, defaultSimServedModel, i)
	}
	file, err := client.Files.New(t.Context(), openai.FileNewParams{File: openai.File(strings.NewReader(in.String()), "in.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Batches.New(t.Context(), openai.BatchNewParams{InputFileID: file.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	for b.Status != openai.BatchStatusCompleted {
		if b.Status == openai.BatchStatusFailed || b.Status == openai.BatchStatusExpired {
			t.Fatalf("batch %+v", b)
		}
		time.Sleep(10 * time.Millisecond)
		if b, err = client.Batches.Get(t.Context(), b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if b.RequestCounts.Completed != 6 || b.ErrorFileID != "" || b.Usage.OutputTokens == 0 {
		t.Fatalf("batch %+v", b)
	}
	resp, err := client.Files.Content(t.Context(), b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int `json:"status_code"`
				Body       struct {
					Object  string `json:"object"`
					Choices []any  `json:"choices"`
				} `json:"body"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Response.StatusCode != 200 || l.Response.Body.Object != "chat.completion" || len(l.Response.Body.Choices) != 1 {
			t.Fatalf("line %s: %v", sc.Text(), err)
		}
		seen[l.CustomID] = true
	}
	if len(seen) != 6 {
		t.Fatalf("answers for %v", seen)
	}
}
