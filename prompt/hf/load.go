package hf

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unsafe"
)

// ErrUnsupported is wrapped by load errors for tokenizer.json features this
// package does not implement; such a model needs the engine's tokenizer.
var ErrUnsupported = errors.New("hf: unsupported tokenizer")

// Model is a model directory's tokenizer and chat template.
type Model struct {
	Tokenizer *Tokenizer
	// Template is the chat template of tokenizer_config.json; nil when it
	// has none.
	Template *Template
}

// Load reads dir/tokenizer.json (or tokenizer.json.gz) and
// dir/tokenizer_config.json, which may be missing when the model has no
// chat template.
func Load(dir string) (*Model, error) {
	tj, err := readMaybeGzip(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	tok, err := ParseTokenizer(tj)
	if err != nil {
		return nil, err
	}
	m := &Model{Tokenizer: tok}
	cfg, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hf: %w", err)
	}
	c, err := ParseConfig(cfg)
	if err != nil {
		return nil, err
	}
	if c.ChatTemplate != "" {
		if m.Template, err = NewTemplate(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// readMaybeGzip reads path, or path.gz gunzipped when path is missing.
func readMaybeGzip(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("hf: %w", err)
	}
	f, err := os.Open(path + ".gz")
	if err != nil {
		return nil, fmt.Errorf("hf: %s or %s.gz: %w", path, filepath.Base(path), err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("hf: %s.gz: %w", path, err)
	}
	b, err = io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("hf: %s.gz: %w", path, err)
	}
	return b, nil
}

type tokenizerJSON struct {
	AddedTokens []struct {
		ID         uint32 `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer   *component `json:"normalizer"`
	PreTokenizer *component `json:"pre_tokenizer"`
	Model        struct {
		Type                    string            `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  json.RawMessage   `json:"merges"`
	} `json:"model"`
}

// component is a normalizer or pre-tokenizer of tokenizer.json.
type component struct {
	Type          string       `json:"type"`
	Normalizers   []*component `json:"normalizers"`
	PreTokenizers []*component `json:"pretokenizers"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior       string `json:"behavior"`
	Invert         bool   `json:"invert"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	UseRegex       bool   `json:"use_regex"`
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

// ParseTokenizer builds a Tokenizer from the contents of a tokenizer.json.
// Models other than byte-level BPE with the Qwen2/Qwen3 or Llama 3
// pre-tokenizer, and options that would change how text splits, are
// refused with an error wrapping ErrUnsupported rather than tokenized
// inexactly.
func ParseTokenizer(data []byte) (*Tokenizer, error) {
	var tj tokenizerJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("hf: tokenizer.json: %w", err)
	}
	t := &Tokenizer{cache: newWordCache(cacheSlots)}
	if err := t.setNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	if err := t.setPreTokenizer(tj.PreTokenizer); err != nil {
		return nil, err
	}
	m := &tj.Model
	switch {
	case m.Type != "BPE":
		return nil, unsupported("model type %q", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, unsupported("BPE dropout")
	case m.ByteFallback:
		return nil, unsupported("byte_fallback")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, unsupported("subword prefix or suffix")
	}
	t.ignoreMerges = m.IgnoreMerges
	if err := t.setVocab(m.Vocab); err != nil {
		return nil, err
	}
	if err := t.setMerges(m.Merges); err != nil {
		return nil, err
	}
	for _, a := range tj.AddedTokens {
		switch {
		case a.Content == "":
			return nil, fmt.Errorf("hf: tokenizer.json: added token %d is empty", a.ID)
		case a.SingleWord || a.LStrip || a.RStrip:
			return nil, unsupported("added token %q with single_word, lstrip or rstrip", a.Content)
		case a.Normalized && t.nfc:
			// Matched in the normalized text, where a neighbour may compose
			// with its ends; only raw matching is implemented.
			return nil, unsupported("added token %q matched after normalization", a.Content)
		}
		t.added.add(a.Content, a.ID)
		t.setToken(a.ID, a.Content)
	}
	return t, nil
}

// isNFC reports whether s is in NFC, allocating nothing in steady state.
func isNFC(s string) bool {
	sc := scratchPool.Get().(*scratch)
	ok := sc.normalize(s) == s
	putScratch(sc)
	return ok
}

func (t *Tokenizer) setNormalizer(c *component) error {
	if c == nil {
		return nil
	}
	switch c.Type {
	case "NFC":
		t.nfc = true
		return nil
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.setNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	}
	return unsupported("normalizer %q", c.Type)
}

func (t *Tokenizer) setPreTokenizer(c *component) error {
	if c == nil || c.Type != "Sequence" || len(c.PreTokenizers) != 2 {
		return unsupported("pre-tokenizer other than Split then ByteLevel")
	}
	s, b := c.PreTokenizers[0], c.PreTokenizers[1]
	if b.Type != "ByteLevel" || b.AddPrefixSpace || b.UseRegex {
		return unsupported("pre-tokenizer other than Split then ByteLevel")
	}
	if s.Type != "Split" || s.Pattern == nil || s.Pattern.Regex == nil || s.Behavior != "Isolated" || s.Invert {
		return unsupported("pre-tokenizer other than an isolating Split")
	}
	switch *s.Pattern.Regex {
	case patternQwen:
		t.split = splitter{digits: 1}
	case patternLlama3:
		t.split = splitter{digits: 3}
	default:
		return unsupported("pre-tokenizer pattern %q", *s.Pattern.Regex)
	}
	return nil
}

// fromByteLevel is the raw bytes a vocabulary entry stands for.
func fromByteLevel(tok string) (string, bool) {
	b := make([]byte, 0, len(tok))
	for _, r := range tok {
		c, ok := runeToByte[r]
		if !ok {
			return "", false
		}
		b = append(b, c)
	}
	return string(b), true
}

func (t *Tokenizer) setToken(id uint32, raw string) {
	for int(id) >= len(t.tokens) {
		t.tokens = append(t.tokens, "")
	}
	t.tokens[id] = raw
}

func (t *Tokenizer) setVocab(vocab map[string]uint32) error {
	if len(vocab) == 0 {
		return fmt.Errorf("hf: tokenizer.json: empty vocabulary")
	}
	t.vocab = make(map[string]uint32, len(vocab))
	t.tokens = make([]string, len(vocab))
	for tok, id := range vocab {
		raw, ok := fromByteLevel(tok)
		if !ok {
			return unsupported("vocabulary entry %q outside the byte-level alphabet", tok)
		}
		t.vocab[raw] = id
		t.setToken(id, raw)
	}
	for b := range 256 {
		id, ok := t.vocab[string([]byte{byte(b)})]
		if !ok {
			return fmt.Errorf("hf: tokenizer.json: no token for byte %#02x", b)
		}
		t.byteIDs[b] = id
	}
	return nil
}

// setMerges reads merges written either as "left right" strings or as
// [left, right] pairs.
func (t *Tokenizer) setMerges(raw json.RawMessage) error {
	var pairs [][2]string
	if rest := bytes.TrimLeft(raw, " \t\r\n"); len(rest) > 0 && rest[0] == '[' && bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("[")) {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return fmt.Errorf("hf: tokenizer.json: merges: %w", err)
		}
	} else {
		var lines []string
		if err := json.Unmarshal(raw, &lines); err != nil {
			return fmt.Errorf("hf: tokenizer.json: merges: %w", err)
		}
		pairs = make([][2]string, len(lines))
		for i, l := range lines {
			left, right, ok := strings.Cut(l, " ")
			if !ok {
				return fmt.Errorf("hf: tokenizer.json: merge %d %q is not a pair", i, l)
			}
			pairs[i] = [2]string{left, right}
		}
	}
	t.merges = make(map[uint64]uint64, len(pairs))
	for rank, p := range pairs {
		l, okL := fromByteLevel(p[0])
		r, okR := fromByteLevel(p[1])
		left, okL2 := t.vocab[l]
		right, okR2 := t.vocab[r]
		merged, okM := t.vocab[l+r]
		if !okL || !okR || !okL2 || !okR2 || !okM {
			return fmt.Errorf("hf: tokenizer.json: merge %d %q %q: token not in the vocabulary", rank, p[0], p[1])
		}
		key := uint64(left)<<32 | uint64(right)
		if _, dup := t.merges[key]; !dup {
			t.merges[key] = uint64(rank)<<32 | uint64(merged)
		}
	}
	return nil
}

func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
