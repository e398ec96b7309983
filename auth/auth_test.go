package auth

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestAuthenticate(t *testing.T) {
	secret := "tp-0123456789abcdef0123456789abcdef0123456789a"
	keyed := map[KeyHash]string{HashKey(secret): "acme"}
	for _, tc := range []struct {
		name          string
		open          bool
		authorization string
		tenant        string
		ok            bool
	}{
		{name: "open without header", open: true, tenant: DefaultTenant, ok: true},
		{name: "open ignores any key", open: true, authorization: "Bearer sk-whatever", tenant: DefaultTenant, ok: true},
		{name: "key", authorization: "Bearer " + secret, tenant: "acme", ok: true},
		{name: "key with scheme in capitals", authorization: "BEARER " + secret, tenant: "acme", ok: true},
		{name: "key with trailing space", authorization: "Bearer " + secret + " ", tenant: "acme", ok: true},
		{name: "no header"},
		{name: "scheme only", authorization: "Bearer "},
		{name: "other scheme", authorization: "Basic " + secret},
		{name: "no scheme", authorization: secret},
		{name: "unknown key", authorization: "Bearer tp-nope"},
		{name: "prefix of the key", authorization: "Bearer " + secret[:20]},
		{name: "overlong", authorization: "Bearer " + strings.Repeat("x", MaxKeyLen+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := New(Options{Logger: quiet()})
			a.SetKeys(tc.open, keyed)
			tenant, ok := a.Authenticate(tc.authorization)
			if tenant != tc.tenant || ok != tc.ok {
				t.Errorf("got %q %v, want %q %v", tenant, ok, tc.tenant, tc.ok)
			}
		})
	}
	t.Run("refuses all before SetKeys", func(t *testing.T) {
		a, _ := New(Options{Logger: quiet()})
		if _, ok := a.Authenticate("Bearer " + secret); ok {
			t.Error("authenticated before any keys were published")
		}
	})
}

func TestIsAdmin(t *testing.T) {
	const token = "admin-secret"
	for _, tc := range []struct {
		name          string
		adminToken    string
		authorization string
		want          bool
	}{
		{name: "token", adminToken: token, authorization: "Bearer " + token, want: true},
		{name: "token as hash", adminToken: HashKey(token).String(), authorization: "Bearer " + token, want: true},
		{name: "scheme in lower case", adminToken: token, authorization: "bearer " + token, want: true},
		{name: "the hash is not the token", adminToken: HashKey(token).String(), authorization: "Bearer " + HashKey(token).String()},
		{name: "wrong token", adminToken: token, authorization: "Bearer nope"},
		{name: "basic", adminToken: token, authorization: "Basic " + token},
		{name: "no header", adminToken: token},
		{name: "disabled", authorization: "Bearer anything"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := New(Options{AdminToken: tc.adminToken, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			if got := a.IsAdmin(tc.authorization); got != tc.want {
				t.Errorf("IsAdmin = %v, want %v", got, tc.want)
			}
			if a.AdminEnabled() != (tc.adminToken != "") {
				t.Errorf("AdminEnabled = %v", a.AdminEnabled())
			}
		})
	}
	if _, err := New(Options{AdminToken: "sha256:zz"}); err == nil {
		t.Error("a malformed hash is accepted")
	}
}

func TestKeyHash(t *testing.T) {
	h := HashKey("x")
	if !strings.HasPrefix(h.String(), HashPrefix) || len(h.String()) != len(HashPrefix)+64 {
		t.Fatalf("String %q", h)
	}
	if back, err := ParseKeyHash(h.String()); err != nil || back != h {
		t.Errorf("ParseKeyHash(String) = %v, %v", back, err)
	}
	for _, bad := range []string{"x", "sha256:abc", "sha256:" + strings.Repeat("z", 64)} {
		if _, err := ParseKeyHash(bad); err == nil {
			t.Errorf("ParseKeyHash(%q) accepted", bad)
		}
	}
	long := strings.Repeat("k", maxStackKey+1)
	if HashKey(long) == HashKey(long[:maxStackKey]) {
		t.Error("a key past the stack buffer hashes as its prefix")
	}
	s := NewSecret()
	if !strings.HasPrefix(s, KeyPrefix) || len(s) != len(KeyPrefix)+43 || s == NewSecret() {
		t.Errorf("NewSecret %q", s)
	}
}

func newKeyedAuth(tb testing.TB) (*Authenticator, string) {
	a, err := New(Options{Logger: quiet()})
	if err != nil {
		tb.Fatal(err)
	}
	secret := "tp-0123456789abcdef0123456789abcdef0123456789a"
	m := map[KeyHash]string{HashKey(secret): "acme"}
	for i := range 1000 {
		m[HashKey(strings.Repeat("k", i+1))] = "other"
	}
	a.SetKeys(false, m)
	return a, "Bearer " + secret
}

func TestAuthenticateDoesNotAllocate(t *testing.T) {
	a, h := newKeyedAuth(t)
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := a.Authenticate(h); !ok {
			t.Fatal("not authenticated")
		}
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	a, h := newKeyedAuth(b)
	b.ReportAllocs()
	for b.Loop() {
		a.Authenticate(h)
	}
}
