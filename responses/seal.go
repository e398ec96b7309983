package responses

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sealed content is how turnpike hands a stateless client (store:false)
// what only turnpike should read back: a reasoning item's text
// (include: ["reasoning.encrypted_content"]) and a compaction item's
// summary. The client keeps the blob and sends it back as input; the
// service opens it and the engine sees the text again.
//
// A blob is base64url (no padding) of
//
//	version (1 byte, sealVersion) | key id (4 bytes) | nonce (12 bytes) | AES-256-GCM ciphertext and tag
//
// with the version, the kind of item and the tenant as additional data,
// so a blob opens only as the kind of item it was issued for and only for
// the tenant it was issued to. The key id is the first 4 bytes of the
// SHA-256 of the key: keys can be rotated by listing the new one first in
// Config.SealKeys and keeping the old ones after it.

const (
	sealVersion  = 1
	sealKeyLen   = 32
	sealKeyIDLen = 4
	sealHeader   = 1 + sealKeyIDLen
	// sealKeyName is where a generated key is kept in the store.
	sealKeyName = "seal"
)

// Sealed kinds, in the additional data.
const (
	sealReasoning  = "reasoning"
	sealCompaction = "compaction"
)

// errSealed is the class of a blob that does not open: tampered with,
// sealed by another gateway's key, for another tenant or kind, or not a
// blob at all.
var errSealed = errors.New("responses: encrypted content does not open")

// sealer seals and opens blobs. It is immutable once built.
type sealer struct {
	// current seals; every key in keys opens.
	current uint32
	keys    map[uint32]cipher.AEAD
}

// newSealer builds a sealer over keys, the first of which seals; each
// must be 32 bytes.
func newSealer(keys [][]byte) (*sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("responses: no seal key")
	}
	s := &sealer{keys: make(map[uint32]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if len(k) != sealKeyLen {
			return nil, fmt.Errorf("responses: sealKeys[%d] is %d bytes; want %d", i, len(k), sealKeyLen)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		id := sealKeyID(k)
		if i == 0 {
			s.current = id
		}
		s.keys[id] = aead
	}
	return s, nil
}

func sealKeyID(k []byte) uint32 {
	h := sha256.Sum256(k)
	return binary.BigEndian.Uint32(h[:sealKeyIDLen])
}

func sealAD(kind, tenant string) []byte {
	ad := make([]byte, 0, 2+len(kind)+len(tenant))
	ad = append(ad, sealVersion)
	ad = append(ad, kind...)
	ad = append(ad, 0)
	return append(ad, tenant...)
}

// seal returns the blob of plaintext, a kind of item's, for tenant.
func (s *sealer) seal(kind, tenant string, plaintext []byte) string {
	aead := s.keys[s.current]
	b := make([]byte, sealHeader+aead.NonceSize(), sealHeader+aead.NonceSize()+len(plaintext)+aead.Overhead())
	b[0] = sealVersion
	binary.BigEndian.PutUint32(b[1:sealHeader], s.current)
	rand.Read(b[sealHeader:])
	b = aead.Seal(b, b[sealHeader:], plaintext, sealAD(kind, tenant))
	return base64.RawURLEncoding.EncodeToString(b)
}

// open returns the plaintext of a blob seal made for kind and tenant, or
// an error of class errSealed.
func (s *sealer) open(kind, tenant, blob string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(blob)
	if err != nil {
		return nil, fmt.Errorf("%w: not issued by this gateway", errSealed)
	}
	if len(b) < sealHeader || b[0] != sealVersion {
		return nil, fmt.Errorf("%w: not issued by this gateway", errSealed)
	}
	aead, ok := s.keys[binary.BigEndian.Uint32(b[1:sealHeader])]
	if !ok {
		return nil, fmt.Errorf("%w: sealed with a key this gateway does not hold", errSealed)
	}
	if len(b) < sealHeader+aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: truncated", errSealed)
	}
	nonce := b[sealHeader : sealHeader+aead.NonceSize()]
	out, err := aead.Open(nil, nonce, b[sealHeader+aead.NonceSize():], sealAD(kind, tenant))
	if err != nil {
		return nil, fmt.Errorf("%w: altered, or issued for another item or tenant", errSealed)
	}
	return out, nil
}

// sealKeys is the key list the service seals with: the configured keys,
// or the key kept in the store, generated and kept on first use so that
// blobs survive a restart.
func sealKeys(ctx context.Context, store *StateStore, configured [][]byte) ([][]byte, error) {
	if len(configured) > 0 {
		return configured, nil
	}
	k, err := store.Secret(ctx, sealKeyName, func() []byte {
		k := make([]byte, sealKeyLen)
		rand.Read(k)
		return k
	})
	if err != nil {
		return nil, fmt.Errorf("responses: reading the seal key: %w", err)
	}
	return [][]byte{k}, nil
}
