package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// TraceRecord is one line of a Mooncake-format trace.
type TraceRecord struct {
	// Timestamp is the arrival time in ms since the trace start.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are in tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs are the prefix hashes of the prompt's 512-token blocks.
	HashIDs []int64 `json:"hash_ids"`
}

// At is the record's arrival time as a duration from the trace start.
func (r TraceRecord) At() time.Duration { return time.Duration(r.Timestamp) * time.Millisecond }

// Bounds on trace fields; a line beyond them is rejected rather than allowed
// to allocate without limit.
const (
	maxTraceTokens   = 10 << 20
	maxTraceLineSize = 16 << 20
)

// ErrTraceLine is wrapped by every error about a malformed trace line.
var ErrTraceLine = errors.New("bench: bad trace line")

// ParseTraceLine parses one JSONL line of a trace. It checks what replay
// relies on: non-negative lengths and timestamp, bounded lengths.
func ParseTraceLine(line []byte) (TraceRecord, error) {
	var r TraceRecord
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&r); err != nil {
		return TraceRecord{}, fmt.Errorf("%w: %v", ErrTraceLine, err)
	}
	if dec.More() {
		return TraceRecord{}, fmt.Errorf("%w: trailing data", ErrTraceLine)
	}
	switch {
	case r.Timestamp < 0:
		return TraceRecord{}, fmt.Errorf("%w: negative timestamp %d", ErrTraceLine, r.Timestamp)
	case r.InputLength < 0 || r.InputLength > maxTraceTokens:
		return TraceRecord{}, fmt.Errorf("%w: input_length %d out of range", ErrTraceLine, r.InputLength)
	case r.OutputLength < 0 || r.OutputLength > maxTraceTokens:
		return TraceRecord{}, fmt.Errorf("%w: output_length %d out of range", ErrTraceLine, r.OutputLength)
	case r.Timestamp > int64(time.Duration(1<<62)/time.Millisecond):
		return TraceRecord{}, fmt.Errorf("%w: timestamp %d out of range", ErrTraceLine, r.Timestamp)
	}
	return r, nil
}

// TraceReader reads a trace one record at a time, holding one line in
// memory.
type TraceReader struct {
	sc   *bufio.Scanner
	line int
	rec  TraceRecord
	err  error
}

// NewTraceReader reads records from r.
func NewTraceReader(r io.Reader) *TraceReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLineSize)
	return &TraceReader{sc: sc}
}

// Next advances to the next record, skipping blank lines. It returns false
// at the end or on the first error; see Err.
func (t *TraceReader) Next() bool {
	if t.err != nil {
		return false
	}
	for t.sc.Scan() {
		t.line++
		b := bytes.TrimSpace(t.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		r, err := ParseTraceLine(b)
		if err != nil {
			t.err = fmt.Errorf("line %d: %w", t.line, err)
			return false
		}
		t.rec = r
		return true
	}
	if err := t.sc.Err(); err != nil {
		t.err = fmt.Errorf("bench: reading trace: line %d: %w", t.line+1, err)
	}
	return false
}

// Record is the record Next advanced to.
func (t *TraceReader) Record() TraceRecord { return t.rec }

// Err is the error that stopped Next, or nil at a clean end.
func (t *TraceReader) Err() error { return t.err }

// TraceRequest is one planned request of a trace replay.
type TraceRequest struct {
	// At is when the request is due, from the replay start (already scaled).
	At              time.Duration
	InputTokens     int
	MaxOutputTokens int
	HashIDs         []int64
}

// Prompt builds the request's text (see TracePrompt).
func (r TraceRequest) Prompt() string { return TracePrompt(r.HashIDs, r.InputTokens) }

// LoadTrace reads the trace at tc.Path and plans its replay: requests in
// the window, at most Limit of them, at timestamps rebased to the window's
// start and multiplied by TimeScale. Prompts are built when sent, not here.
func LoadTrace(tc TraceConfig) ([]TraceRequest, error) {
	f, err := os.Open(tc.Path)
	if err != nil {
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	defer f.Close()
	return PlanTrace(f, tc)
}

// PlanTrace is LoadTrace on a reader.
func PlanTrace(r io.Reader, tc TraceConfig) ([]TraceRequest, error) {
	scale := tc.TimeScale
	if scale <= 0 {
		scale = DefaultTimeScale
	}
	var out []TraceRequest
	tr := NewTraceReader(r)
	for tr.Next() {
		rec := tr.Record()
		at := rec.At()
		if at < tc.WindowStart.D() || (tc.WindowEnd > 0 && at >= tc.WindowEnd.D()) {
			continue
		}
		if tc.Limit > 0 && len(out) >= tc.Limit {
			break
		}
		outTokens := rec.OutputLength
		if tc.MaxOutputTokens > 0 {
			outTokens = min(outTokens, tc.MaxOutputTokens)
		}
		out = append(out, TraceRequest{
			At:              time.Duration(float64(at-tc.WindowStart.D()) * scale),
			InputTokens:     rec.InputLength,
			MaxOutputTokens: max(outTokens, 1),
			HashIDs:         rec.HashIDs,
		})
	}
	if err := tr.Err(); err != nil {
		return nil, fmt.Errorf("bench: trace %s: %w", tc.Path, err)
	}
	return out, nil
}
