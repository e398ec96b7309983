package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Defaults of RedisOptions.
const (
	// DefaultRedisKeyPrefix begins every key turnpike writes to Redis.
	DefaultRedisKeyPrefix = "turnpike:"
	// DefaultRedisReplicaTimeout bounds the WAIT of a synced write.
	DefaultRedisReplicaTimeout = time.Second
	// DefaultRedisScanPage is the number of keys a scan reads at once.
	DefaultRedisScanPage = 512
	// DefaultRedisHealthInterval is how often an idle or unavailable
	// Redis is pinged.
	DefaultRedisHealthInterval = time.Second
)

// minPingTimeout bounds a health ping from below: a ping on a loaded
// server may take longer than a short interval.
const minPingTimeout = time.Second

// Redis deployment modes, the mode parameter of a URL.
const (
	RedisStandalone = "standalone"
	RedisCluster    = "cluster"
	RedisSentinel   = "sentinel"
)

// RedisOptions configure OpenRedis.
type RedisOptions struct {
	// KeyPrefix begins every key, so that several gateways' deployments
	// (or tests) can share one Redis. It must not hold '{' or '}'.
	// Default "turnpike:".
	KeyPrefix string
	// Replicas is the number of replicas a synced write waits for
	// (WAIT) before it returns; 0, the default, waits for none. A synced
	// write that fewer replicas acknowledge within ReplicaTimeout fails:
	// it is applied on the primary, but not known to survive its loss.
	Replicas int
	// ReplicaTimeout bounds that wait. Default 1s.
	ReplicaTimeout time.Duration
	// ScanPage is the number of keys a scan reads in one step; each step
	// is a consistent view. Default 512.
	ScanPage int
	// HealthInterval is how often Redis is pinged, while no operation has
	// been answered since the last ping, so that DB.Health learns of an
	// outage before a request meets it, and of the server's return while
	// requests are refused. Each ping waits at most the interval, and at
	// least 1s. Default 1s; negative never pings (only operations tell).
	HealthInterval time.Duration
	// Logger hears of Redis becoming unavailable and answering again;
	// nil means slog.Default().
	Logger *slog.Logger
}

// EnsureDefaults fills the zero fields.
func (o *RedisOptions) EnsureDefaults() {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultRedisKeyPrefix
	}
	if o.ReplicaTimeout == 0 {
		o.ReplicaTimeout = DefaultRedisReplicaTimeout
	}
	if o.ScanPage == 0 {
		o.ScanPage = DefaultRedisScanPage
	}
	if o.HealthInterval == 0 {
		o.HealthInterval = DefaultRedisHealthInterval
	}
}

// Validate reports every problem at once.
func (o *RedisOptions) Validate() error {
	var errs []error
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		errs = append(errs, fmt.Errorf("key prefix %q holds '{' or '}', which would break the hash tags", o.KeyPrefix))
	}
	if o.Replicas < 0 {
		errs = append(errs, errors.New("replicas must not be negative"))
	}
	if o.ReplicaTimeout < 0 {
		errs = append(errs, errors.New("replica timeout must not be negative"))
	}
	if o.ScanPage < 0 {
		errs = append(errs, errors.New("scan page must not be negative"))
	}
	return errors.Join(errs...)
}

// OpenRedis connects to the Redis (or Valkey) at rawURL and checks that it
// answers. The URL is redis:// or rediss:// (TLS), with go-redis's query
// parameters (dial_timeout, pool_size, …) and one of turnpike's own, mode:
//
//	redis://user:pass@host:6379/0                    standalone
//	redis://host:7000?addr=host:7001&addr=host:7002   cluster (several addr)
//	redis://host:7000?mode=cluster                    cluster, one seed
//	redis://host:26379?master_name=mymaster           sentinel (its addresses)
//
// Each namespace is one hash slot in a cluster (its keys share a hash tag),
// so a batch is one MULTI on one node.
func OpenRedis(ctx context.Context, rawURL string, opts RedisOptions) (*DB, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("state: redis: %w", err)
	}
	client, err := NewRedisClient(rawURL)
	if err != nil {
		return nil, err
	}
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("state: redis at %s: %w", RedactURL(rawURL), err)
	}
	e := &redisEngine{client: client, opts: opts}
	db := newDB(e, opts.Logger)
	e.health = &db.health
	if opts.HealthInterval > 0 {
		db.startProbe(e.ping, opts.HealthInterval, max(opts.HealthInterval, minPingTimeout))
	}
	return db, nil
}

// NewRedisClient makes the go-redis client for a URL as OpenRedis reads
// it, without connecting.
func NewRedisClient(rawURL string) (redis.UniversalClient, error) {
	mode, goURL, err := redisMode(rawURL)
	if err != nil {
		return nil, fmt.Errorf("state: redis URL %s: %w", RedactURL(rawURL), err)
	}
	switch mode {
	case RedisCluster:
		o, err := redis.ParseClusterURL(goURL)
		if err != nil {
			return nil, fmt.Errorf("state: redis URL %s: %w", RedactURL(rawURL), err)
		}
		return redis.NewClusterClient(o), nil
	case RedisSentinel:
		o, err := redis.ParseFailoverURL(goURL)
		if err != nil {
			return nil, fmt.Errorf("state: redis URL %s: %w", RedactURL(rawURL), err)
		}
		return redis.NewFailoverClient(o), nil
	default:
		o, err := redis.ParseURL(goURL)
		if err != nil {
			return nil, fmt.Errorf("state: redis URL %s: %w", RedactURL(rawURL), err)
		}
		return redis.NewClient(o), nil
	}
}

// redisMode reads the deployment mode of a URL (its mode parameter, else
// sentinel for master_name, cluster for more than one address) and returns
// the URL without the parameter, as go-redis reads it.
func redisMode(rawURL string) (mode, goURL string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", errors.New("not a URL")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return "", "", fmt.Errorf("scheme %q, want redis or rediss", u.Scheme)
	}
	q := u.Query()
	mode = q.Get("mode")
	q.Del("mode")
	u.RawQuery = q.Encode()
	switch mode {
	case RedisStandalone, RedisCluster, RedisSentinel:
	case "":
		mode = RedisStandalone
		if q.Has("master_name") {
			mode = RedisSentinel
		} else if q.Has("addr") {
			mode = RedisCluster
		}
	default:
		return "", "", fmt.Errorf("mode %q, want standalone, cluster or sentinel", mode)
	}
	if mode == RedisSentinel && q.Get("master_name") == "" {
		return "", "", errors.New("sentinel mode needs master_name")
	}
	return mode, u.String(), nil
}

// RedactURL is rawURL with its password hidden, for logs and errors.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// redisEngine keeps a namespace under one hash tag, {<prefix>}: its keys as
// strings at <KeyPrefix>{<prefix>}v<key>, and the sorted set
// <KeyPrefix>{<prefix>}i holding every key of the namespace with score 0,
// so that ZRANGEBYLEX walks them in byte order. Writes change both in one
// MULTI (or one Lua script), so the set and the strings never disagree.
type redisEngine struct {
	client redis.UniversalClient
	opts   RedisOptions
	// errs count failed operations (not ErrNotFound, not fn's errors).
	errs struct{ get, scan, apply, lease, draw atomic.Uint64 }
	// health is the DB's, for the metrics.
	health *health
}

// names are the Redis keys of one namespace.
type redisNames struct {
	index  string // the sorted set
	values string // the prefix of the strings
}

func (e *redisEngine) names(prefix []byte) redisNames {
	tag := e.opts.KeyPrefix + "{" + string(prefix) + "}"
	return redisNames{index: tag + "i", values: tag + "v"}
}

func (e *redisEngine) get(ctx context.Context, prefix, key []byte) ([]byte, error) {
	v, err := e.client.Get(ctx, e.names(prefix).values+string(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		e.errs.get.Add(1)
		return nil, fmt.Errorf("state: redis: reading %q: %w", key, err)
	}
	return v, nil
}

// scanPage reads up to ARGV[5] keys of the index in the lex range
// [ARGV[2], ARGV[3]] (descending when ARGV[4] is "1") and their values,
// in one step: the page is a consistent view. It returns the number of
// keys it read and the last of them, then each key and its value.
var scanPage = redis.NewScript(`
local keys
if ARGV[4] == '1' then
  keys = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[3], ARGV[2], 'LIMIT', 0, ARGV[5])
else
  keys = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, ARGV[5])
end
local out = {#keys, keys[#keys] or ''}
if #keys == 0 then return out end
local full = {}
for i, k in ipairs(keys) do full[i] = ARGV[1] .. k end
local vals = redis.call('MGET', unpack(full))
for i, k in ipairs(keys) do
  if vals[i] then
    out[#out + 1] = k
    out[#out + 1] = vals[i]
  end
end
return out
`)

func (e *redisEngine) scan(ctx context.Context, prefix, lo, hi []byte, reverse bool, fn func(key, value []byte) error) error {
	n := e.names(prefix)
	min, max := "["+string(lo), "+"
	if hi != nil {
		max = "(" + string(hi)
	}
	page := strconv.Itoa(e.opts.ScanPage)
	for {
		rev := "0"
		if reverse {
			rev = "1"
		}
		res, err := scanPage.Run(ctx, e.client, []string{n.index}, n.values, min, max, rev, page).Slice()
		if err != nil {
			e.errs.scan.Add(1)
			return fmt.Errorf("state: redis: scan: %w", err)
		}
		if len(res) < 2 {
			return fmt.Errorf("state: redis: scan: a reply of %d values", len(res))
		}
		read, _ := res[0].(int64)
		last, _ := res[1].(string)
		for i := 2; i+1 < len(res); i += 2 {
			k, _ := res[i].(string)
			v, _ := res[i+1].(string)
			if err := fn([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		if read < int64(e.opts.ScanPage) {
			return nil
		}
		if reverse {
			max = "(" + last
		} else {
			min = "(" + last
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// applyOps applies a batch that holds a DeletePrefix, in order, as one
// script: ARGV[1] is the strings' prefix, then per op its kind ('p' put
// key value, 'd' delete key, 'x' delete the lex range min max).
var applyOps = redis.NewScript(`
local vp = ARGV[1]
local i = 2
while i <= #ARGV do
  local kind = ARGV[i]
  if kind == 'p' then
    redis.call('SET', vp .. ARGV[i + 1], ARGV[i + 2])
    redis.call('ZADD', KEYS[1], 0, ARGV[i + 1])
    i = i + 3
  elseif kind == 'd' then
    redis.call('DEL', vp .. ARGV[i + 1])
    redis.call('ZREM', KEYS[1], ARGV[i + 1])
    i = i + 2
  else
    while true do
      local keys = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[i + 1], ARGV[i + 2], 'LIMIT', 0, 512)
      if #keys == 0 then break end
      for _, k in ipairs(keys) do
        redis.call('DEL', vp .. k)
        redis.call('ZREM', KEYS[1], k)
      end
    end
    i = i + 3
  end
end
return #ARGV
`)

func (e *redisEngine) apply(ctx context.Context, prefix []byte, b *Batch) error {
	var err error
	if b.Sync && e.opts.Replicas > 0 {
		err = e.applyWait(ctx, prefix, b)
	} else if err = e.applyOn(ctx, e.client, prefix, b); err != nil {
		err = fmt.Errorf("state: redis: batch: %w", err)
	}
	if err != nil {
		e.errs.apply.Add(1)
	}
	return err
}

// applyWait applies a synced batch and waits for the replicas on the same
// connection: WAIT counts the replicas that have the connection's last
// write, and with it every write acknowledged before.
func (e *redisEngine) applyWait(ctx context.Context, prefix []byte, b *Batch) error {
	var node *redis.Client
	switch c := e.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, e.names(prefix).index); err != nil {
			return fmt.Errorf("state: redis: batch: %w", err)
		}
	default:
		return fmt.Errorf("state: redis: batch: replicas with a %T client", e.client)
	}
	conn := node.Conn()
	defer conn.Close()
	if err := e.applyOn(ctx, conn, prefix, b); err != nil {
		return fmt.Errorf("state: redis: batch: %w", err)
	}
	acked, err := conn.Wait(ctx, e.opts.Replicas, e.opts.ReplicaTimeout).Result()
	if err != nil {
		return fmt.Errorf("state: redis: waiting for replicas: %w", err)
	}
	if acked < int64(e.opts.Replicas) {
		return fmt.Errorf("state: redis: write acknowledged by %d of %d replicas within %v", acked, e.opts.Replicas, e.opts.ReplicaTimeout)
	}
	return nil
}

// redisWriter is what a batch is applied through: the client, or one
// connection of it.
type redisWriter interface {
	redis.Scripter
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

func (e *redisEngine) applyOn(ctx context.Context, w redisWriter, prefix []byte, b *Batch) error {
	n := e.names(prefix)
	for _, o := range b.ops {
		if o.kind == opDeletePrefix {
			return e.applyScript(ctx, w, n, b)
		}
	}
	_, err := w.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, o := range b.ops {
			k := n.values + string(o.key)
			switch o.kind {
			case opPut:
				p.Set(ctx, k, o.bytes(), 0)
				p.ZAdd(ctx, n.index, redis.Z{Member: o.key})
			case opDelete:
				p.Del(ctx, k)
				p.ZRem(ctx, n.index, o.key)
			}
		}
		return nil
	})
	return err
}

func (e *redisEngine) applyScript(ctx context.Context, w redisWriter, n redisNames, b *Batch) error {
	args := make([]any, 1, 1+3*len(b.ops))
	args[0] = n.values
	for _, o := range b.ops {
		switch o.kind {
		case opPut:
			args = append(args, "p", o.key, o.bytes())
		case opDelete:
			args = append(args, "d", o.key)
		case opDeletePrefix:
			max := "+"
			if end := prefixEnd(o.key); end != nil {
				max = "(" + string(end)
			}
			args = append(args, "x", "["+string(o.key), max)
		}
	}
	return applyOps.Run(ctx, w, []string{n.index}, args...).Err()
}

// takeLease sets KEYS[1] to ARGV[1] for ARGV[2] ms when it is missing
// (never set, or expired) or holds ARGV[1] already; 1 if it did.
var takeLease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// renewLease extends KEYS[1] to ARGV[2] ms when it holds ARGV[1]; 1 if
// it did.
var renewLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// dropLease deletes KEYS[1] when it holds ARGV[1].
var dropLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

// leaseKey is the Redis key of a lease: under the namespace's hash tag,
// apart from its values and index, so scans never see it.
func (e *redisEngine) leaseKey(prefix, key []byte) string {
	return e.opts.KeyPrefix + "{" + string(prefix) + "}l" + string(key)
}

func (e *redisEngine) lease(ctx context.Context, prefix, key []byte, holder string, ttl time.Duration, take bool) (bool, error) {
	ms := max(ttl.Milliseconds(), 1)
	script := renewLease
	if take {
		script = takeLease
	}
	n, err := script.Run(ctx, e.client, []string{e.leaseKey(prefix, key)}, holder, ms).Int()
	if err != nil {
		e.errs.lease.Add(1)
		return false, fmt.Errorf("state: redis: lease %q: %w", key, err)
	}
	return n == 1, nil
}

func (e *redisEngine) release(ctx context.Context, prefix, key []byte, holder string) error {
	if err := dropLease.Run(ctx, e.client, []string{e.leaseKey(prefix, key)}, holder).Err(); err != nil {
		e.errs.lease.Add(1)
		return fmt.Errorf("state: redis: releasing lease %q: %w", key, err)
	}
	return nil
}

// ping asks the server to answer, for the health probe.
func (e *redisEngine) ping(ctx context.Context) error {
	if err := e.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("state: redis: ping: %w", err)
	}
	return nil
}

func (e *redisEngine) close() error { return e.client.Close() }

func (e *redisEngine) collector() prometheus.Collector { return newRedisMetrics(e) }

var _ engine = (*redisEngine)(nil)

// redisMetrics exports the client's connection pool and the errors the
// engine met, read at each scrape.
type redisMetrics struct {
	e                        *redisEngine
	hits, misses, timeouts   *prometheus.Desc
	conns, errs, staleClosed *prometheus.Desc
	up                       *prometheus.Desc
}

func newRedisMetrics(e *redisEngine) *redisMetrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("turnpike_state_redis_"+name, help, labels, nil)
	}
	return &redisMetrics{
		e:           e,
		hits:        d("pool_hits_total", "Connections taken from the Redis client's pool without dialling."),
		misses:      d("pool_misses_total", "Connections the Redis client's pool had to dial."),
		timeouts:    d("pool_timeouts_total", "Waits for a free pooled Redis connection that timed out."),
		staleClosed: d("pool_stale_closed_total", "Pooled Redis connections closed as stale."),
		conns:       d("pool_connections", "Redis connections in the pool, by state.", "state"),
		errs:        d("errors_total", "State store operations on Redis that failed, by operation.", "op"),
		up:          d("up", "1 while Redis answers (its last operation or ping succeeded), 0 while it is unavailable: responses that are to be stored are refused with 503 and /readyz is not ready."),
	}
}

func (m *redisMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.hits, m.misses, m.timeouts, m.staleClosed, m.conns, m.errs, m.up} {
		ch <- d
	}
}

func (m *redisMetrics) Collect(ch chan<- prometheus.Metric) {
	ps := m.e.client.PoolStats()
	ch <- prometheus.MustNewConstMetric(m.hits, prometheus.CounterValue, float64(ps.Hits))
	ch <- prometheus.MustNewConstMetric(m.misses, prometheus.CounterValue, float64(ps.Misses))
	ch <- prometheus.MustNewConstMetric(m.timeouts, prometheus.CounterValue, float64(ps.Timeouts))
	ch <- prometheus.MustNewConstMetric(m.staleClosed, prometheus.CounterValue, float64(ps.StaleConns))
	ch <- prometheus.MustNewConstMetric(m.conns, prometheus.GaugeValue, float64(ps.IdleConns), "idle")
	ch <- prometheus.MustNewConstMetric(m.conns, prometheus.GaugeValue, float64(ps.TotalConns-ps.IdleConns), "in_use")
	up := 1.0
	if m.e.health.err() != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up)
	for op, n := range map[string]uint64{"get": m.e.errs.get.Load(), "scan": m.e.errs.scan.Load(), "apply": m.e.errs.apply.Load(), "lease": m.e.errs.lease.Load(), "draw": m.e.errs.draw.Load()} {
		ch <- prometheus.MustNewConstMetric(m.errs, prometheus.CounterValue, float64(n), op)
	}
}
