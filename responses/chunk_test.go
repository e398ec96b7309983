package responses

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzReadChunk: readChunk reads every chunk as json.Unmarshal reads it
// into a zero chatChunk, and fails where it fails, whatever it read into
// the same chunk before.
func FuzzReadChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"He"},"logprobs":null,"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":"\u00e9\n\"x\""},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`,
		`{"choices":[{"delta":{"reasoning_content":"think"}},{"delta":{"reasoning":"more","content":null}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"choices":[],"error":{"message":"boom"}}`,
		`{"Choices":[{"delta":{"content":"x"}}]}`,
		`{"choices":[{"delta":{"content":"a","Content":"b"}}]}`,
		`{"choices":null}`, `{"choices":[null]}`, `{"choices":[{"delta":null}]}`, `{"choices":[{"delta":{"content":1}}]}`,
		`{"choices":[{"delta":{"content":"x"}}]`, `[]`, `{"choices":[{"delta":{"content":"\ud800"}}]}`,
	} {
		f.Add([]byte(s), []byte(`{"choices":[{"delta":{"content":"before"},"finish_reason":"length"},{"delta":{}}]}`))
	}
	f.Fuzz(func(t *testing.T, data, before []byte) {
		var want chatChunk
		wantErr := json.Unmarshal(data, &want)
		var got chatChunk
		readChunk(before, &got)
		err := readChunk(data, &got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: readChunk error %v, encoding/json error %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if len(got.Choices) == 0 && len(want.Choices) == 0 {
			got.Choices, want.Choices = nil, nil // empty and nil read alike
		}
		if !reflect.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			t.Fatalf("%q:\nreadChunk    %s\nencoding/json %s", data, g, w)
		}
	})
}

// The common chunk, a text delta, is read without encoding/json's
// allocations: the choices slice is kept, the content is one string.
func TestReadChunkAllocs(t *testing.T) {
	data := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}]}`)
	var c chatChunk
	if err := readChunk(data, &c); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { readChunk(data, &c) }); n > 1 {
		t.Errorf("%v allocations a chunk, want at most 1", n)
	}
	if c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content != "Hello" {
		t.Errorf("content %v", c.Choices[0].Delta.Content)
	}
}
