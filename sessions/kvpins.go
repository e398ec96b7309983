package sessions

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// KV is the part of a durable key-value namespace a KVPinStore needs; the
// state store's namespaces (responses.Meta) satisfy it.
type KV interface {
	Put(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	Scan(ctx context.Context, prefix []byte, fn func(key, value []byte) error) error
}

// KVPinStore keeps pins in a durable key-value namespace, one key per
// session: "pin/<tenant>\x00<key>" → {"endpoint","at"}.
type KVPinStore struct {
	KV KV
	// Clock stamps pins; nil means time.Now.
	Clock func() time.Time
}

const pinPrefix = "pin/"

type storedPin struct {
	Endpoint string    `json:"endpoint"`
	At       time.Time `json:"at"`
}

func pinKey(tenant, key string) []byte {
	return []byte(pinPrefix + tenant + "\x00" + key)
}

// PutPin implements PinStore.
func (s *KVPinStore) PutPin(ctx context.Context, tenant, key, endpointID string) error {
	if endpointID == "" {
		return s.KV.Delete(ctx, pinKey(tenant, key))
	}
	now := time.Now
	if s.Clock != nil {
		now = s.Clock
	}
	b, err := json.Marshal(storedPin{Endpoint: endpointID, At: now()})
	if err != nil {
		return err
	}
	return s.KV.Put(ctx, pinKey(tenant, key), b)
}

// LoadPins implements PinStore. Records it cannot read are skipped: a pin
// is a routing hint, and losing one costs one cold prefill.
func (s *KVPinStore) LoadPins(ctx context.Context) ([]Pin, error) {
	var pins []Pin
	err := s.KV.Scan(ctx, []byte(pinPrefix), func(k, v []byte) error {
		tenant, key, ok := strings.Cut(string(k[len(pinPrefix):]), "\x00")
		var sp storedPin
		if !ok || json.Unmarshal(v, &sp) != nil || sp.Endpoint == "" {
			return nil
		}
		pins = append(pins, Pin{Tenant: tenant, Key: key, Endpoint: sp.Endpoint, At: sp.At})
		return nil
	})
	return pins, err
}

var _ PinStore = (*KVPinStore)(nil)
