package dispatch

import (
	"bytes"
	"strings"
	"testing"
)

// A sentLog gives back every line it kept, in order and whole, however
// the lines fall across its blocks (one longer than a block included),
// and nothing once released.
func TestSentLogLines(t *testing.T) {
	var want [][]byte
	for i, n := range []int{10, sentBlock - 20, 30, sentBlock + 5, 1, sentBlock - 1, 7} {
		want = append(want, bytes.Repeat([]byte{byte('a' + i)}, n))
	}
	var s sentLog
	for _, l := range want {
		s.add(l)
	}
	var got [][]byte
	for l := range s.lines() {
		got = append(got, bytes.Clone(l))
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines back, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("line %d: %d bytes of %q, want %d of %q", i, len(got[i]), got[i][:1], len(want[i]), want[i][:1])
		}
	}
	s.release()
	for range s.lines() {
		t.Fatal("a line after release")
	}
	// A released log keeps lines again, from reused blocks.
	s.add([]byte("x"))
	var again strings.Builder
	for l := range s.lines() {
		again.Write(l)
	}
	if again.String() != "x" {
		t.Errorf("after release: %q", again.String())
	}
}

func BenchmarkSentLogAnswer(b *testing.B) {
	// An answer of 660 chunks of a chat stream, kept and released as a
	// turn does.
	line := []byte(`{"id":"chatcmpl-0123456789","object":"chat.completion.chunk","created":1700000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}`)
	b.ReportAllocs()
	for b.Loop() {
		var s sentLog
		for range 660 {
			s.add(line)
		}
		s.release()
	}
}
