package sim

import (
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestTokenize(t *testing.T) {
	// The rule as Tokenize's comment spells it, in big numbers.
	id := func(s string) uint32 {
		v := new(big.Int)
		for i := len(s) - 1; i >= 0; i-- {
			v.Lsh(v, 8).Or(v, big.NewInt(int64(s[i])))
		}
		if len(s) < TokenBytes {
			v.Or(v, new(big.Int).Lsh(big.NewInt(int64(len(s))), 32))
		}
		phi, _ := new(big.Int).SetString("9E3779B97F4A7C15", 16)
		v.Mul(v, phi).Mod(v, new(big.Int).Lsh(big.NewInt(1), 64)).Rsh(v, 64-17)
		return uint32(v.Uint64())
	}
	tests := []struct {
		text string
		want []uint32
	}{
		{"", []uint32{}},
		{"a", []uint32{id("a")}},
		{"abcd", []uint32{id("abcd")}},
		{"abcdefgh", []uint32{id("abcd"), id("efgh")}},
		{"abcdef", []uint32{id("abcd"), id("ef")}},
		// Runs cut through multi-byte characters: "é" is 2 bytes.
		{"ééé", []uint32{id("éé"), id("é")}},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got := Tokenize(tt.text)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Tokenize(%q) = %v, want %v", tt.text, got, tt.want)
			}
			if n := CountTokens(tt.text); n != len(tt.want) {
				t.Errorf("CountTokens(%q) = %d, want %d", tt.text, n, len(tt.want))
			}
		})
	}
}

func TestTokenizePrefixStable(t *testing.T) {
	text := strings.Repeat("agents send many turns that share long prefixes; ", 20)
	full := Tokenize(text)
	for n := 0; n <= len(text); n++ {
		prefix := Tokenize(text[:n])
		// Every token of the prefix but a partial last one is shared.
		stable := n / TokenBytes
		if !slices.Equal(prefix[:stable], full[:stable]) {
			t.Fatalf("prefix of %d bytes: tokens differ from the full text's", n)
		}
	}
}

func FuzzTokenize(f *testing.F) {
	f.Add("hello world", "and more")
	f.Add("", "é")
	f.Add("<|user|>\n", "\x00\xff")
	f.Fuzz(func(t *testing.T, a, b string) {
		ta, tab := Tokenize(a), Tokenize(a+b)
		if len(ta) != CountTokens(a) || len(tab) != CountTokens(a+b) {
			t.Fatalf("count mismatch")
		}
		stable := len(a) / TokenBytes
		if !slices.Equal(ta[:stable], tab[:stable]) {
			t.Fatalf("not prefix-stable")
		}
		for _, id := range tab {
			if id >= VocabSize {
				t.Fatalf("id %d out of vocabulary", id)
			}
		}
	})
}

func TestBlockHash(t *testing.T) {
	toks := Tokenize(strings.Repeat("x", 64))
	a := BlockHash(0, toks)
	if a != BlockHash(0, slices.Clone(toks)) {
		t.Fatal("BlockHash is not deterministic")
	}
	if a == BlockHash(1, toks) {
		t.Error("parent does not change the hash")
	}
	// The documented layout: parent then ids, little-endian.
	buf := []byte{0, 0, 0, 0, 0, 0, 0, 0}
	for _, id := range toks {
		buf = append(buf, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	if want := xxhash.Sum64(buf); a != want {
		t.Errorf("BlockHash = %x, want %x", a, want)
	}
}

func TestRenderChat(t *testing.T) {
	var msgs []ChatMessage
	err := json.Unmarshal([]byte(`[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"Weather in "},{"type":"text","text":"Paris?"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"}
	]`), &msgs)
	if err != nil {
		t.Fatal(err)
	}
	tools := json.RawMessage(`[ {"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"x":1.50}}} ]`)
	got := RenderChat(msgs, tools)
	want := "<|tools|>\n" +
		`[{"function":{"name":"get_weather","parameters":{"properties":{"city":{"type":"string"}},"type":"object","x":1.50}},"type":"function"}]` + "\n" +
		"<|system|>\nBe brief.\n" +
		"<|user|>\nWeather in Paris?\n" +
		"<|assistant|>\n\n<|tool_call|>get_weather {\"city\":\"Paris\"}\n" +
		"<|tool|>\nsunny\n" +
		"<|assistant|>\n"
	if got != want {
		t.Errorf("RenderChat:\n got %q\nwant %q", got, want)
	}
	if got := RenderChat(msgs[:1], json.RawMessage(`[]`)); got != "<|system|>\nBe brief.\n<|assistant|>\n" {
		t.Errorf("empty tools rendered: %q", got)
	}
}

func FuzzDecodeChatRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}],"tool_choice":{"type":"function","function":{"name":"f"}}}`))
	f.Add([]byte(`{"messages":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeChatRequest(body)
		if err != nil {
			return
		}
		prompt := RenderChat(req.Messages, req.Tools)
		if !strings.HasSuffix(prompt, assistantTurn) {
			t.Fatalf("rendered prompt lacks the generation marker: %q", prompt)
		}
		tool, err := chooseTool(req)
		if err == nil && tool != nil {
			out := planToolCall(1, tool, 64)
			if out.tokens < 1 || out.tokens > 64 {
				t.Fatalf("tool call of %d tokens", out.tokens)
			}
		}
	})
}
