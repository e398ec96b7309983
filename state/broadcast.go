package state

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Broadcast is a channel that every process on one store hears: a message
// published reaches every subscriber at that moment, the publisher's own
// subscription included, at most once, and is kept nowhere. It is for
// what may be lost (a subscriber that is disconnected misses what is sent
// meanwhile): routing hints between gateways, not state. It carries no
// namespace's keys.
//
// Redis: PUBLISH and SUBSCRIBE on the channel <keyPrefix>bc/<name>; in a
// cluster a message published on any node reaches subscribers on all.
type Broadcast struct {
	client  redis.UniversalClient
	channel string
}

// Broadcast returns the channel called name, or nil when the store has no
// other processes to reach (Pebble and memory are one process's).
func (db *DB) Broadcast(name string) *Broadcast {
	e, ok := db.eng.(*redisEngine)
	if !ok {
		return nil
	}
	return &Broadcast{client: e.client, channel: e.opts.KeyPrefix + "bc/" + name}
}

// Publish sends msg to the channel's subscribers.
func (b *Broadcast) Publish(ctx context.Context, msg []byte) error {
	if err := b.client.Publish(ctx, b.channel, msg).Err(); err != nil {
		return fmt.Errorf("state: publish: %w", err)
	}
	return nil
}

// Subscribe calls fn with each message until ctx ends, from this
// goroutine; msg is valid only during the call. It returns nil when ctx
// ends, or the error that broke the subscription (the client reconnects
// by itself from a lost connection; what is published meanwhile is
// missed).
func (b *Broadcast) Subscribe(ctx context.Context, fn func(msg []byte)) error {
	ps := b.client.Subscribe(ctx, b.channel)
	// A read of the subscription does not heed ctx: closing it ends the
	// read.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer func() {
		stop()
		ps.Close()
	}()
	// The first reply confirms the subscription: a message published
	// after Receive returns is heard.
	if _, err := ps.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("state: subscribe: %w", err)
	}
	var buf []byte
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("state: subscribe: %w", err)
		}
		buf = append(buf[:0], m.Payload...)
		fn(buf)
	}
}
