package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// KeyPrefix starts every key NewSecret makes, so that a leaked key is easy
// to recognise in logs and by secret scanners.
const KeyPrefix = "tp-"

// HashPrefix starts a KeyHash as the config file writes it.
const HashPrefix = "sha256:"

// AdminTokenEnv is the environment variable that holds the admin token.
// When set it takes precedence over the config file, so that a secret store
// can supply the token without it being written in the file.
const AdminTokenEnv = "TURNPIKE_ADMIN_TOKEN"

// KeyHash is the SHA-256 of an API key's secret: what is stored and what
// a presented key is looked up by.
type KeyHash [sha256.Size]byte

// String is the hash as the config file writes it, "sha256:<hex>".
func (h KeyHash) String() string { return HashPrefix + hex.EncodeToString(h[:]) }

// HashKey is the one definition of a key's hash, shared by the admin API
// that stores it and the Authenticator that checks it.
//
// A fast unsalted hash is enough here, where a password would need a slow
// salted one: keys are 256 random bits, so there is no dictionary to try
// and no brute force that a slower hash would hinder, and a slow hash would
// cost every request milliseconds. A lookup by hash needs no constant-time
// compare either: its timing can reveal at most something about a hash,
// and a hash gives nothing back of its secret.
func HashKey(secret string) KeyHash {
	// Hashing from a stack copy keeps the request path free of allocation:
	// converting a string longer than 32 bytes to []byte goes to the heap.
	var buf [maxStackKey]byte
	if len(secret) <= len(buf) {
		n := copy(buf[:], secret)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(secret))
}

const maxStackKey = 128

// ParseKeyHash parses "sha256:<64 hex digits>".
func ParseKeyHash(s string) (KeyHash, error) {
	var h KeyHash
	hexs, ok := strings.CutPrefix(s, HashPrefix)
	if !ok {
		return h, fmt.Errorf("%q does not start with %q", s, HashPrefix)
	}
	if len(hexs) != 2*len(h) {
		return h, fmt.Errorf("a SHA-256 has %d hex digits, not %d", 2*len(h), len(hexs))
	}
	if _, err := hex.Decode(h[:], []byte(hexs)); err != nil {
		return h, fmt.Errorf("%q is not hex: %w", hexs, err)
	}
	return h, nil
}

// NewSecret makes a new key: KeyPrefix and 32 random bytes, base64url.
func NewSecret() string {
	var raw [32]byte
	rand.Read(raw[:]) // never fails; it crashes the program instead
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
}
