package prompt

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fieldNames are the keys the reference reads, at any depth.
var fieldNames = []string{
	"model", "stream", "max_tokens", "max_completion_tokens", "messages", "prompt",
	"prompt_cache_key", "service_tier", "tools", "stream_options", "include_usage",
	"role", "content", "tool_calls", "function", "name", "arguments", "text",
}

// foldedKey reports whether body is valid JSON with a key, at any depth,
// that encoding/json would take for one of fieldNames without being it:
// "Model", or "ſtream" with a long s. The one-pass parser matches keys
// exactly, so such bodies are read differently on purpose and are left
// out of the comparison rather than generated around.
func foldedKey(body []byte) bool {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				for _, name := range fieldNames {
					if k != name && strings.EqualFold(k, name) {
						return true
					}
				}
				if walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range v {
				if walk(e) {
					return true
				}
			}
		}
		return false
	}
	return walk(v)
}

// checkAgainstRef parses body both ways and fails on any difference: in
// whether it is refused, in the Param and Code of the refusal, or in the
// Request.
func checkAgainstRef(t *testing.T, body []byte, chat bool) {
	if foldedKey(body) {
		return
	}
	orig := bytes.Clone(body)
	parse := ParseCompletion
	if chat {
		parse = ParseChat
	}
	got, gotErr := parse(body)
	want, wantErr := parseRequestRef(body, chat)
	if !bytes.Equal(body, orig) {
		t.Fatalf("the parser changed the body")
	}
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("body %q:\n got %+v, %v\nwant %+v, %v", body, got, gotErr, want, wantErr)
	}
	if wantErr != nil {
		var g, w *FieldError
		if !errors.As(gotErr, &g) || !errors.As(wantErr, &w) {
			t.Fatalf("body %q: errors %v and %v are not both *FieldError", body, gotErr, wantErr)
		}
		if g.Param != w.Param || g.Code != w.Code {
			t.Fatalf("body %q:\n got %s/%s (%s)\nwant %s/%s (%s)", body, g.Param, g.Code, g.Message, w.Param, w.Code, w.Message)
		}
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("body %q:\n got %+v\nwant %+v", body, got, want)
	}
}

// fuzzSeeds are the bodies both fuzz targets start from: the table cases,
// the gateway's test bodies, an agent's request and bodies that exercise
// escapes, UTF-8, nesting, duplicates and the block scanners' edges.
func fuzzSeeds() []string {
	var seeds []string
	for _, tc := range chatCases {
		seeds = append(seeds, tc.body)
	}
	for _, tc := range completionCases {
		seeds = append(seeds, tc.body)
	}
	long := strings.Repeat(`line\n\t\"quoted\" \\ back\/slash \u00e9\ud83d\ude00 `, 40)
	seeds = append(seeds,
		`{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"test-model","stream":true,"max_tokens":8,"messages":[{"role":"system","content":"You are terse.\nFix it."},{"role":"user","content":"Fix the build."}]}`,
		`{"model":"test-model","messages":[{"role":"user","content":"x"}],"max_tokens":99999999}`,
		`{"model":"m","messages":[{"role":"user","content":"`+long+`"}],"x":{"a":[[],{},[{"b":"`+long+`"}]]}}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\""+strings.Repeat("é—\xff\xc3x\\n", 30)+"\"}]}",
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a","arguments":"{\"x\":1}"}},{"function":{"name":"b"}}],"tool_calls":[{"function":{"arguments":"2"}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"a"}},{}],"tool_calls":[{}],"tool_calls":[{},{}]}]}`,
		`{"model":"m","stream_options":{"include_usage":true},"stream_options":{},"messages":[{"role":"user"}]}`,
		`{"model":"m","prompt":[[1,2],[3]],"prompt":["a","b"],"messages":[{"content":[{"text":"a"},{"text":"b","text":null}]}]}`,
	)
	return append(seeds, string(agentBody(16<<10)), string(agentBody(168<<10)))
}

func FuzzParseChat(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAgainstRef(t, body, true) })
}

func FuzzParseCompletion(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkAgainstRef(t, body, false) })
}
