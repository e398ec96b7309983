package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Backends Config.Backend names.
const (
	BackendPebble = "pebble"
	BackendRedis  = "redis"
)

// Config is the state section of the gateway's config: which store, and
// how to reach it.
type Config struct {
	// Backend is "pebble" (the embedded database under the data dir) or
	// "redis" (a Redis or Valkey server that several gateways share).
	// Default pebble.
	Backend string `yaml:"backend"`
	// URL is the Redis URL (see OpenRedis): redis:// or rediss://, with
	// cluster and sentinel forms. Required for redis, unset for pebble.
	URL string `yaml:"url"`
	// KeyPrefix begins every Redis key. Default "turnpike:".
	KeyPrefix string `yaml:"keyPrefix"`
	// Replicas is the number of Redis replicas a synced write waits for
	// (WAIT). Default 0.
	Replicas int `yaml:"replicas"`
	// ReplicaTimeout bounds that wait. Default 1s.
	ReplicaTimeout time.Duration `yaml:"replicaTimeout"`
	// HealthInterval is how often an idle or unavailable Redis is pinged
	// (RedisOptions.HealthInterval): the longest a gateway takes to see
	// Redis back and take writes again. Default 1s.
	HealthInterval time.Duration `yaml:"healthInterval"`
}

// EnsureDefaults fills the zero fields.
func (c *Config) EnsureDefaults() {
	if c.Backend == "" {
		c.Backend = BackendPebble
	}
}

// Validate reports every problem at once, each naming its field.
func (c *Config) Validate() error {
	var errs []error
	switch c.Backend {
	case BackendPebble:
		for _, f := range []struct {
			name string
			set  bool
		}{{"url", c.URL != ""}, {"keyPrefix", c.KeyPrefix != ""}, {"replicas", c.Replicas != 0}, {"replicaTimeout", c.ReplicaTimeout != 0}, {"healthInterval", c.HealthInterval != 0}} {
			if f.set {
				errs = append(errs, fmt.Errorf("state.%s: only for backend redis", f.name))
			}
		}
	case BackendRedis:
		if c.URL == "" {
			errs = append(errs, errors.New("state.url: required for backend redis (redis://host:6379/0)"))
		} else if client, err := NewRedisClient(c.URL); err != nil {
			errs = append(errs, fmt.Errorf("state.url: %w", err))
		} else {
			client.Close()
		}
		o := c.redisOptions()
		if err := o.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("state: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("state.backend: %q, want pebble or redis", c.Backend))
	}
	return errors.Join(errs...)
}

func (c *Config) redisOptions() RedisOptions {
	return RedisOptions{KeyPrefix: c.KeyPrefix, Replicas: c.Replicas, ReplicaTimeout: c.ReplicaTimeout, HealthInterval: c.HealthInterval}
}

// Open opens the store c names: Pebble in dataDir, or the Redis at c.URL.
func Open(ctx context.Context, c Config, dataDir string, log *slog.Logger) (*DB, error) {
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Backend == BackendRedis {
		o := c.redisOptions()
		o.Logger = log
		return OpenRedis(ctx, c.URL, o)
	}
	return OpenPebble(dataDir, PebbleOptions{Logger: log})
}
