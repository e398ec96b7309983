package workload

import "strings"

// BytesPerToken is the size of one token of generated text. Every generated
// word is three letters and a space, so a whitespace tokenizer and a
// bytes/4 estimate agree on the count.
const BytesPerToken = 4

// BlockTokens is the size of one trace block (a Mooncake hash id), in tokens.
const BlockTokens = 512

// vocab holds the three-letter words text is drawn from: consonant, vowel,
// consonant, so 21×5×21 = 2205 words.
var vocab = func() []string {
	const consonants = "bcdfghjklmnpqrstvwxyz"
	const vowels = "aeiou"
	w := make([]string, 0, len(consonants)*len(vowels)*len(consonants))
	for i := range len(consonants) {
		for j := range len(vowels) {
			for k := range len(consonants) {
				w = append(w, string([]byte{consonants[i], vowels[j], consonants[k]}))
			}
		}
	}
	return w
}()

// Rand is the generator behind all text and plans (splitmix64): tiny,
// stateless to seed, and the same on every platform, so text is a pure
// function of its seed. Seed it with Mix.
type Rand uint64

// Next draws the next number.
func (s *Rand) Next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// appendWords appends n words (each "abc ") drawn from seed to b.
func appendWords(b *strings.Builder, seed uint64, n int) {
	b.Grow(n * BytesPerToken)
	g := Rand(seed)
	for range n {
		b.WriteString(vocab[g.Next()%uint64(len(vocab))])
		b.WriteByte(' ')
	}
}

// words returns n words drawn from seed, without the trailing space.
func words(seed uint64, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	appendWords(&b, seed, n)
	return strings.TrimSuffix(b.String(), " ")
}

// Mix combines seed parts into one seed for a piece of text or a plan, so
// that the tenant-2 system prompt and the session-2 tool result never
// coincide.
func Mix(parts ...uint64) uint64 {
	h := Rand(0x5851f42d4c957f2d)
	for _, p := range parts {
		h ^= Rand(p)
		h.Next()
	}
	return h.Next()
}

// UserText is n words of a user's message, a pure function of the seed
// parts: the text of a user turn that no plan of this package sends.
func UserText(n int, parts ...uint64) string {
	return words(Mix(append([]uint64{domainUser}, parts...)...), n)
}

// Seed domains for Mix.
const (
	domainBlock uint64 = iota + 1
	domainSystem
	domainSchema
	domainUser
	domainTool
	domainArgs
)

// BlockText returns the text of trace block id: BlockTokens words, 2048
// bytes, ending in a space so blocks concatenate. The same id always gives
// the same text, whatever the seed of the run.
func BlockText(id int64) string {
	var b strings.Builder
	appendWords(&b, Mix(domainBlock, uint64(id)), BlockTokens)
	return b.String()
}

// TracePrompt returns the prompt of one trace request: the blocks of ids
// concatenated and cut to inputTokens tokens (inputTokens*4-1 bytes: the
// last word's space is dropped). Missing blocks (fewer ids than the length
// needs) are filled with the last id's successors.
func TracePrompt(ids []int64, inputTokens int) string {
	if inputTokens <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(inputTokens * BytesPerToken)
	left := inputTokens
	for i := 0; left > 0; i++ {
		var id int64
		switch {
		case i < len(ids):
			id = ids[i]
		case len(ids) > 0:
			id = ids[len(ids)-1] + int64(i-len(ids)+1)
		default:
			id = int64(i)
		}
		n := min(left, BlockTokens)
		appendWords(&b, Mix(domainBlock, uint64(id)), n)
		left -= n
	}
	return strings.TrimSuffix(b.String(), " ")
}
