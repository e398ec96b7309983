package dispatch

import (
	"encoding/json"
	"testing"
)

// usageByJSON is what parseUsage must agree with.
func usageByJSON(data []byte) (Usage, bool) {
	var v struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return Usage{}, false
	}
	return *v.Usage, true
}

var usageCases = []string{
	`{"id":"c","choices":[{"message":{"content":"a \"usage\": {\"prompt_tokens\": 9}"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`,
	`{"usage":{"prompt_tokens":1,"completion_tokens_details":{"reasoning_tokens":4},"extra":[1,{"a":"}"}]}}`,
	`{"usage":null}`,
	`{"choices":[]}`,
	`{"Usage":{"prompt_tokens":5}}`,
	`{"usage":{"Prompt_Tokens":5}}`,
	`{"usage":{"prompt_tokens":5},"usage":{"completion_tokens":2}}`,
	`{"usage":{"prompt_tokens":5.0}}`,
	`{"usage":{"prompt_tokens":"5"}}`,
	`{"usage":{"prompt_tokens":99999999999999999999999}}`,
	`{"usage":{"prompt_tokens":null,"prompt_tokens_details":null}}`,
	`{"usage":[1]}`,
	`{"usage":{"prompt_tokens":1}`,
	`[{"usage":{"prompt_tokens":1}}]`,
	`null`,
	`{"us\u0061ge":{"prompt_tokens":7}}`,
	` { "usage" : { "prompt_tokens" : 3 , "total_tokens" : 4 } } `,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":2,"cached_tokens":3}}}`,
	`{"usage":{"prompt_tokens":-1}}`,
	`{"usage":{"prompt_tokens":1e3}}`,
}

func TestParseUsageAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range usageCases {
		got, gok := parseUsage([]byte(c))
		want, wok := usageByJSON([]byte(c))
		if got != want || gok != wok {
			t.Errorf("%s: got %+v %v, want %+v %v", c, got, gok, want, wok)
		}
	}
}

func TestParseUsageDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	answer := []byte(usageCases[0])
	chunk := []byte(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello"}}]}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := parseUsage(answer); !ok {
			t.Fatal("no usage")
		}
		if _, ok := parseUsage(chunk); ok {
			t.Fatal("usage in a chunk without one")
		}
	}); n != 0 {
		t.Fatalf("%v allocations a run", n)
	}
}

func FuzzParseUsage(f *testing.F) {
	for _, c := range usageCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gok := parseUsage(data)
		want, wok := usageByJSON(data)
		if got != want || gok != wok {
			t.Fatalf("%q: got %+v %v, want %+v %v", data, got, gok, want, wok)
		}
	})
}
