package responses

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"testing"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, sealKeyLen) }

func TestSealOpen(t *testing.T) {
	s, err := newSealer([][]byte{testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	blob := s.seal(sealReasoning, "acme", []byte("I should list the files first."))
	got, err := s.open(sealReasoning, "acme", blob)
	if err != nil || string(got) != "I should list the files first." {
		t.Fatalf("open: %q, %v", got, err)
	}
	if again := s.seal(sealReasoning, "acme", []byte("I should list the files first.")); again == blob {
		t.Error("two seals of one text are the same blob: the nonce is not fresh")
	}

	raw, _ := base64.RawURLEncoding.DecodeString(blob)
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-1] ^= 1
	rotated, _ := newSealer([][]byte{testKey(2), testKey(1)})
	other, _ := newSealer([][]byte{testKey(3)})
	for _, tt := range []struct {
		name, kind, tenant, blob string
		s                        *sealer
	}{
		{"tampered", sealReasoning, "acme", base64.RawURLEncoding.EncodeToString(flipped), s},
		{"another tenant", sealReasoning, "globex", blob, s},
		{"another kind", sealCompaction, "acme", blob, s},
		{"another gateway's key", sealReasoning, "acme", blob, other},
		{"not base64", sealReasoning, "acme", "gAAAAAB!!", s},
		{"truncated", sealReasoning, "acme", blob[:20], s},
		{"empty", sealReasoning, "acme", "", s},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.s.open(tt.kind, tt.tenant, tt.blob); !errors.Is(err, errSealed) {
				t.Fatalf("opened, or wrong error: %v", err)
			}
		})
	}
	t.Run("rotated key still opens", func(t *testing.T) {
		if got, err := rotated.open(sealReasoning, "acme", blob); err != nil || len(got) == 0 {
			t.Fatalf("open with the old key listed second: %v", err)
		}
		newer := rotated.seal(sealReasoning, "acme", []byte("x"))
		if _, err := s.open(sealReasoning, "acme", newer); !errors.Is(err, errSealed) {
			t.Fatalf("a blob sealed with the new key opened with only the old: %v", err)
		}
	})
}

func TestSealKeyBadLength(t *testing.T) {
	if _, err := newSealer([][]byte{[]byte("short")}); err == nil {
		t.Fatal("a 5-byte key was taken")
	}
	cfg := Config{SealKeys: [][]byte{testKey(1), []byte("short")}}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate took a 5-byte key")
	}
}

// TestSealKeyKept: with no configured key, the generated one is kept in
// the store, so a blob issued before a restart opens after it.
func TestSealKeyKept(t *testing.T) {
	dir := t.TempDir()
	svc, st := reopen(t, dir)
	blob := svc.sealer.seal(sealCompaction, "acme", []byte("summary"))
	svc.Close(context.Background())
	st.Close()

	svc, st = reopen(t, dir)
	defer st.Close()
	defer svc.Close(context.Background())
	if got, err := svc.sealer.open(sealCompaction, "acme", blob); err != nil || string(got) != "summary" {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}

func BenchmarkSeal(b *testing.B) {
	s, _ := newSealer([][]byte{testKey(1)})
	text := bytes.Repeat([]byte("thinking "), 200)
	b.ReportAllocs()
	for b.Loop() {
		blob := s.seal(sealReasoning, "acme", text)
		if _, err := s.open(sealReasoning, "acme", blob); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzOpenSealed(f *testing.F) {
	s, _ := newSealer([][]byte{testKey(1)})
	f.Add(s.seal(sealReasoning, "acme", []byte("thought")))
	f.Add("")
	f.Add("AQAAAAA")
	f.Fuzz(func(t *testing.T, blob string) {
		got, err := s.open(sealReasoning, "acme", blob)
		if err != nil {
			if !errors.Is(err, errSealed) {
				t.Fatalf("error of another class: %v", err)
			}
			return
		}
		// Only a blob this sealer issued opens: sealing it again opens
		// to the same text.
		if again, err := s.open(sealReasoning, "acme", s.seal(sealReasoning, "acme", got)); err != nil || !bytes.Equal(again, got) {
			t.Fatalf("reseal: %v", err)
		}
	})
}
