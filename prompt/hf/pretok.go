package hf

import (
	"unicode"
	"unicode/utf8"
)

// Rune classes of the pre-tokenizer pattern.
const (
	clsOther   uint8 = iota // not \s, \p{L} or \p{N}
	clsLetter               // \p{L}
	clsNumber               // \p{N}
	clsSpace                // \s other than \r and \n
	clsNewline              // \r or \n
)

var asciiClass = func() (t [128]uint8) {
	for c := range rune(128) {
		t[c] = classOf(c)
	}
	return t
}()

// bmpClass is the class of every rune of the Basic Multilingual Plane,
// 64 KiB, so that classifying text in any script is one load rather than
// a search of Unicode's tables.
var bmpClass = func() *[1 << 16]uint8 {
	var t [1 << 16]uint8
	for r := range rune(1 << 16) {
		t[r] = classOf(r)
	}
	return &t
}()

func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// classAt classifies the rune at s[i] and returns its size. Invalid UTF-8
// is one byte of class other. unicode.IsSpace is exactly the \s of the
// Oniguruma engine the Hugging Face library compiles the pattern with:
// \t to \r, U+0085 and the White_Space characters.
func classAt(s string, i int) (uint8, int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 1<<16 {
		return bmpClass[r], n // U+FFFD for invalid UTF-8 is of class other
	}
	return classOf(r), n
}

// splitter is the Split pre-tokenizer of the Qwen2/Qwen3 and Llama 3
// tokenizers, a hand-written scanner for the pattern
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (D is 1 for Qwen, 3 for Llama 3) with the "Isolated" behaviour: every
// match is a piece. Go's regexp has no lookahead, and a scanner is faster
// anyway. The alternatives are tried in order at each position, as a
// backtracking engine does; together they match every character, so the
// text splits into matches with no gaps.
type splitter struct {
	digits int // the D of \p{N}{1,D}
}

// Patterns the splitter implements, by the number of digits they group.
const (
	patternQwen   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// next returns the end of the piece that starts at s[i], i < len(s).
func (sp splitter) next(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	c0, n0 := classAt(s, i)
	j := i + n0
	switch c0 {
	case clsLetter:
		return scanLetters(s, j)
	case clsOther, clsSpace:
		// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional character.
		if j < len(s) {
			if c1, n1 := classAt(s, j); c1 == clsLetter {
				return scanLetters(s, j+n1)
			}
		}
	case clsNumber:
		for k := 1; k < sp.digits && j < len(s); k++ {
			c, n := classAt(s, j)
			if c != clsNumber {
				break
			}
			j += n
		}
		return j
	}
	if c0 == clsOther {
		return scanPunct(s, j)
	}
	if s[i] == ' ' && j < len(s) {
		if c1, n1 := classAt(s, j); c1 == clsOther {
			return scanPunct(s, j+n1)
		}
	}
	// A run of whitespace. \s*[\r\n]+ ends after its last newline;
	// otherwise \s+(?!\S) leaves the run's last character for the word
	// after it, and \s+ takes a single character.
	lastNL, lastStart := -1, i
	j = i
	for j < len(s) {
		c, n := classAt(s, j)
		if c == clsNewline {
			lastNL = j
		} else if c != clsSpace {
			break
		}
		lastStart = j
		j += n
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if j == len(s) || lastStart == i {
		return j
	}
	return lastStart
}

// contraction is the length of the contraction suffix s starts with (the
// text after the apostrophe), or 0. The group is case-insensitive, so
// U+017F LATIN SMALL LETTER LONG S, which folds to s, counts as an s.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] | 0x20 {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && s[1]|0x20 == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && s[1]|0x20 == 'l' {
			return 2
		}
	}
	if len(s) > 1 && s[0] == 0xc5 && s[1] == 0xbf {
		return 2
	}
	return 0
}

func scanLetters(s string, j int) int {
	for j < len(s) {
		c := s[j]
		if c < utf8.RuneSelf {
			if asciiClass[c] != clsLetter {
				return j
			}
			j++
			continue
		}
		cl, n := classAt(s, j)
		if cl != clsLetter {
			return j
		}
		j += n
	}
	return j
}

// scanPunct ends [^\s\p{L}\p{N}]+[\r\n]* whose first character ends at j.
func scanPunct(s string, j int) int {
	for j < len(s) {
		c, n := classAt(s, j)
		if c != clsOther {
			break
		}
		j += n
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
		j++
	}
	return j
}
