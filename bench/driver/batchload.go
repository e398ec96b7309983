package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// batchPoll spaces the polls that follow a batch.
const batchPoll = 250 * time.Millisecond

// BatchLoadReport is what became of the batch offered beside a run.
type BatchLoadReport struct {
	ID string `json:"id"`
	// Status is the batch's last status ("completed", or where it stood at
	// the deadline).
	Status string `json:"status"`
	// Lines, Completed and Failed are the batch's request counts.
	Lines     int `json:"lines"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Seconds is from submission to the batch's end, or to the deadline.
	Seconds float64 `json:"seconds"`
	// InDeadline: every line completed before the deadline.
	InDeadline bool `json:"in_deadline"`
	// RunSeconds is from the batch's submission to the end of the run's
	// own load, for scale: a batch done within it ran beside the run's
	// turns.
	RunSeconds float64 `json:"run_seconds"`
	// Error is why the batch could not be submitted or followed.
	Error string `json:"error,omitempty"`
}

// StartBatchLoad submits cfg's batch to target; the function it returns,
// called with when the run's own load ended, waits for the batch up to its
// deadline and reports. Without a batch (Lines 0) it reports nil.
func StartBatchLoad(ctx context.Context, cfg workload.Config, target Target) func(loadEnded time.Time) *BatchLoadReport {
	bc := cfg.BatchLoad
	if bc.Lines <= 0 {
		return func(time.Time) *BatchLoadReport { return nil }
	}
	client := openai.NewClient(option.WithBaseURL(apiBase(target.BaseURL)+"/"), option.WithAPIKey(target.Key(bc.Key)),
		option.WithHTTPClient(&http.Client{Timeout: time.Minute}), option.WithMaxRetries(2))
	start := time.Now()
	rep := &BatchLoadReport{Lines: bc.Lines}
	id, err := submitBatch(ctx, client, cfg)
	if err != nil {
		rep.Error = err.Error()
		return func(time.Time) *BatchLoadReport { return rep }
	}
	rep.ID = id
	return func(loadEnded time.Time) *BatchLoadReport {
		rep.RunSeconds = loadEnded.Sub(start).Seconds()
		followBatch(ctx, client, rep, start, bc.Deadline.D())
		return rep
	}
}

// submitBatch uploads the batch's lines and creates the batch.
func submitBatch(ctx context.Context, client openai.Client, cfg workload.Config) (string, error) {
	var in strings.Builder
	enc := json.NewEncoder(&in)
	for i := range cfg.BatchLoad.Lines {
		line := map[string]any{
			"custom_id": fmt.Sprintf("line-%d", i),
			"method":    "POST",
			"url":       "/v1/chat/completions",
			"body": map[string]any{
				"model":      cfg.Model,
				"max_tokens": cfg.BatchLoad.OutputTokens,
				"messages":   []map[string]string{{"role": "user", "content": workload.BatchPrompt(uint64(cfg.Seed), i, cfg.BatchLoad.PromptTokens)}},
			},
		}
		if err := enc.Encode(line); err != nil {
			return "", err
		}
	}
	file, err := client.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(in.String()), "bench-batch.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		return "", fmt.Errorf("bench: uploading the batch: %w", err)
	}
	b, err := client.Batches.New(ctx, openai.BatchNewParams{
		InputFileID:      file.ID,
		Endpoint:         openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
	})
	if err != nil {
		return "", fmt.Errorf("bench: creating the batch: %w", err)
	}
	return b.ID, nil
}

// followBatch polls the batch until it ends or its deadline passes.
func followBatch(ctx context.Context, client openai.Client, rep *BatchLoadReport, start time.Time, deadline time.Duration) {
	end := start.Add(deadline)
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	for {
		b, err := client.Batches.Get(ctx, rep.ID)
		if err == nil {
			rep.Status = string(b.Status)
			rep.Completed, rep.Failed = int(b.RequestCounts.Completed), int(b.RequestCounts.Failed)
			switch b.Status {
			case openai.BatchStatusCompleted, openai.BatchStatusFailed, openai.BatchStatusCancelled, openai.BatchStatusExpired:
				rep.Seconds = time.Since(start).Seconds()
				rep.InDeadline = b.Status == openai.BatchStatusCompleted && rep.Completed == rep.Lines && !time.Now().After(end)
				return
			}
		}
		t := time.NewTimer(batchPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			rep.Seconds = math.Min(time.Since(start).Seconds(), deadline.Seconds())
			if rep.Error == "" && err != nil {
				rep.Error = err.Error()
			}
			return
		case <-t.C:
		}
	}
}
