package workload

import (
	"bytes"
	"testing"
)

func FuzzParseTraceLine(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2354]}`,
		`{"timestamp": 0, "input_length": 0, "output_length": 0, "hash_ids": []}`,
		`{"timestamp": -1}`, `{}`, `[]`, `null`, `{"hash_ids": [1e400]}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseTraceLine(line)
		if err != nil {
			return
		}
		if r.Timestamp < 0 || r.InputLength < 0 || r.OutputLength < 0 || r.InputLength > maxTraceTokens || r.OutputLength > maxTraceTokens {
			t.Fatalf("accepted out-of-range record %+v", r)
		}
		// A small accepted record always builds a prompt of its length.
		if r.InputLength <= 4096 {
			if p := TracePrompt(r.HashIDs, r.InputLength); r.InputLength > 0 && len(p) != r.InputLength*BytesPerToken-1 {
				t.Fatalf("prompt of %d bytes for %d tokens", len(p), r.InputLength)
			}
		}
		// The reader agrees with the line parser.
		tr := NewTraceReader(bytes.NewReader(append(line, '\n')))
		if !tr.Next() && tr.Err() == nil && len(bytes.TrimSpace(line)) > 0 {
			t.Fatalf("reader skipped a line the parser accepted: %q", line)
		}
	})
}
