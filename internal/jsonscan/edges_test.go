package jsonscan

import (
	"strings"
	"testing"
)

// checkAgainstJSON puts s, the contents of a JSON string, where it is
// decoded (String), skipped (a value Members hands out) and unquoted (a
// key), each document followed by pad, and compares with encoding/json.
func checkAgainstJSON(t *testing.T, s, pad string) {
	t.Helper()
	checkString(t, []byte(`"`+s+`"`+pad))
	checkMembers(t, []byte(`{"s":"`+s+`","k":1}`+pad))
	checkMembers(t, []byte(`{"`+s+`":1}`+pad))
}

// TestBlockEdges puts each kind of stop at every offset around the edges
// of the 64-byte blocks long strings with escapes are read by, where they
// are decoded, skipped and unquoted, and compares with encoding/json.
func TestBlockEdges(t *testing.T) {
	stops := []string{
		`\n`, `\"`, `\\`, `\/`, `\u00e9`, `\ud83d\ude00`, `\ud800x`, `\udc00\ud800`,
		"é", "—", "😀", "\xff", "\xe2\x80", "\xed\xa0\x80", strings.Repeat("\xff", 70),
		`"`, "\x01", `\x`, `\u12`, `\`,
	}
	for _, stop := range stops {
		for off := 0; off < 280; off++ {
			// A block starts at a string's first escape: lead with one
			// for half the offsets.
			s := strings.Repeat("a", off%140) + stop + strings.Repeat(`b\n`, 3) + strings.Repeat("c", 200)
			if off >= 140 {
				s = `\t` + s
			}
			// Whether a block fits depends on what follows the string.
			checkAgainstJSON(t, s, "")
			checkAgainstJSON(t, s, strings.Repeat(" ", off))
		}
	}
}

// TestShortStrings does the same for the short strings, most keys and
// many values, that two word tests read: every length around the two
// words, with each kind of stop at every offset, near the document's end
// and far from it.
func TestShortStrings(t *testing.T) {
	for n := 0; n <= 20; n++ {
		for pos := 0; pos <= n; pos++ {
			for _, stop := range []string{"", `\n`, "é", "\xff", "\x01", `\u00e9`, `"`} {
				s := strings.Repeat("k", pos) + stop + strings.Repeat("v", n-pos)
				for _, pad := range []string{"", strings.Repeat(" ", 20)} {
					checkAgainstJSON(t, s, pad)
				}
			}
		}
	}
}
