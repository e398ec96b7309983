package hf

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// tinyTokenizer is a tokenizer.json with the 256 bytes, the given merges
// (as "left right" lines, in byte-level spelling) and the given
// pre-tokenizer pattern; edit lets a test change the rest.
func tinyTokenizer(t testing.TB, pattern string, merges []string, edit func(map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[string(byteToRune[b])] = b
	}
	for _, m := range merges {
		l, r, _ := strings.Cut(m, " ")
		if _, ok := vocab[l+r]; !ok {
			vocab[l+r] = len(vocab)
		}
	}
	tj := map[string]any{
		"added_tokens": []any{map[string]any{"id": 1000, "content": "<|end|>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	}
	if edit != nil {
		edit(tj)
	}
	b, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseTokenizer(t *testing.T) {
	merges := []string{"1 2", "12 3", "a b", "ab c", "Ġ a"}
	t.Run("llama3 digits", func(t *testing.T) {
		tok, err := ParseTokenizer(tinyTokenizer(t, patternLlama3, merges, nil))
		if err != nil {
			t.Fatal(err)
		}
		// \p{N}{1,3}: "1234" splits as "123" "4"; "123" merges fully, and
		// " abc" merges by rank.
		got := tok.Encode(nil, "1234 abc<|end|>")
		want := []uint32{257, '4', ' ', 259, 1000} // "a b" outranks "Ġ a"
		if !slices.Equal(got, want) {
			t.Errorf("Encode = %v, want %v", got, want)
		}
	})
	t.Run("merges as pairs", func(t *testing.T) {
		b := tinyTokenizer(t, patternQwen, nil, func(tj map[string]any) {
			m := tj["model"].(map[string]any)
			m["vocab"].(map[string]int)["ab"] = 300
			m["merges"] = [][2]string{{"a", "b"}}
		})
		tok, err := ParseTokenizer(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(nil, "abab"); !slices.Equal(got, []uint32{300, 300}) {
			t.Errorf("Encode = %v", got)
		}
	})
	t.Run("ignore merges", func(t *testing.T) {
		b := tinyTokenizer(t, patternQwen, []string{"a b"}, func(tj map[string]any) {
			m := tj["model"].(map[string]any)
			m["ignore_merges"] = true
			m["vocab"].(map[string]int)["abc"] = 400 // reachable by no merge
		})
		tok, err := ParseTokenizer(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(nil, "abc"); !slices.Equal(got, []uint32{400}) {
			t.Errorf("Encode = %v, want the whole word's id", got)
		}
	})
	for _, tc := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"unigram", func(tj map[string]any) { tj["model"].(map[string]any)["type"] = "Unigram" }},
		{"byte fallback", func(tj map[string]any) { tj["model"].(map[string]any)["byte_fallback"] = true }},
		{"other pattern", func(tj map[string]any) {
			tj["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\w+`}
		}},
		{"no pre-tokenizer", func(tj map[string]any) { tj["pre_tokenizer"] = nil }},
		{"lowercase", func(tj map[string]any) { tj["normalizer"] = map[string]any{"type": "Lowercase"} }},
		{"lstrip token", func(tj map[string]any) {
			tj["added_tokens"] = []any{map[string]any{"id": 5, "content": "<x>", "lstrip": true}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokenizer(tinyTokenizer(t, patternQwen, merges, tc.edit))
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("err = %v, want ErrUnsupported", err)
			}
		})
	}
	for _, tc := range []struct{ name, data string }{
		{"not json", `{`},
		{"empty vocab", `{"pre_tokenizer": null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTokenizer([]byte(tc.data)); err == nil {
				t.Error("no error")
			}
		})
	}
	t.Run("merge outside vocabulary", func(t *testing.T) {
		b := tinyTokenizer(t, patternQwen, nil, func(tj map[string]any) { tj["model"].(map[string]any)["merges"] = []string{"x yz"} })
		if _, err := ParseTokenizer(b); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("err = %v, want a vocabulary error", err)
		}
	})
}

func TestLoadMissing(t *testing.T) {
	if _, err := Load(t.TempDir()); err == nil {
		t.Error("Load of an empty directory: no error")
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       Config
		bad        bool
	}{
		{"string", `{"chat_template": "x", "bos_token": "<s>", "eos_token": {"content": "</s>"}}`, Config{ChatTemplate: "x", BOSToken: "<s>", EOSToken: "</s>"}, false},
		{"named", `{"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]}`, Config{ChatTemplate: "d"}, false},
		{"none", `{"bos_token": null}`, Config{}, false},
		{"no default", `{"chat_template": [{"name": "tool_use", "template": "t"}]}`, Config{}, true},
		{"bad token", `{"eos_token": 3}`, Config{}, true},
		{"bad json", `{"chat_template": `, Config{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.data))
			if (err != nil) != tc.bad || got != tc.want {
				t.Errorf("ParseConfig = %+v, %v", got, err)
			}
		})
	}
}

// FuzzParseTokenizer checks that any tokenizer.json is refused or gives a
// tokenizer that encodes without panicking.
func FuzzParseTokenizer(f *testing.F) {
	f.Add(tinyTokenizer(f, patternQwen, []string{"a b", "ab c"}, nil))
	f.Add(tinyTokenizer(f, patternLlama3, nil, nil))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a"]]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := ParseTokenizer(data)
		if err != nil {
			return
		}
		tok.Encode(nil, "abc 123 <|end|> é")
	})
}

// TestLoadPlain loads a directory with an uncompressed tokenizer.json and
// a chat template, and renders a prompt through it.
func TestLoadPlain(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyTokenizer(t, patternQwen, []string{"h i"}, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"chat_template": "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}", "eos_token": "<|end|>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := &prompt.Prompt{Messages: []prompt.Message{{Role: "user", Content: "hi"}}}
	out, err := m.Template.RenderPrompt(p)
	if err != nil || out != "<user>hi<assistant>" {
		t.Fatalf("RenderPrompt = %q, %v", out, err)
	}
	if got := m.Tokenizer.Encode(nil, "hi<|end|>"); !slices.Equal(got, []uint32{256, 1000}) {
		t.Errorf("Encode = %v", got)
	}
	if out, err := m.Template.RenderPrompt(&prompt.Prompt{Text: "raw"}); err != nil || out != "raw" {
		t.Errorf("RenderPrompt of a completion = %q, %v", out, err)
	}
	// Without tokenizer_config.json there is no template.
	os.Remove(filepath.Join(dir, "tokenizer_config.json"))
	if m, err := Load(dir); err != nil || m.Template != nil {
		t.Errorf("Load without a config = %+v, %v", m, err)
	}
}
