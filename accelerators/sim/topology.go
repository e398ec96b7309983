package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// Topologies: how a simulated fleet's replicas split into pools.
const (
	// TopologyAggregated: every replica prefills and decodes, one pool.
	TopologyAggregated = "aggregated"
	// TopologyPD: a prefill pool and a decode pool of the same model, for
	// a gateway to disaggregate: with vLLM's kv_transfer_params, or
	// SGLang's bootstrap fields when the flavour is sglang.
	TopologyPD = "pd"
	// TopologyHBM: aggregated with no KV tier below HBM, whatever the
	// config says: the offload comparison's baseline.
	TopologyHBM = "hbm"
	// TopologyCPUTier: aggregated with a host-memory tier below HBM
	// (Config.KVCPUBlocks, or DefaultCPUTierFactor × HBM).
	TopologyCPUTier = "cpu-tier"
	// TopologyMixed: two pools of one model on different hardware, an
	// H200 pool (vLLM) and a TPU v6e pool (vLLM on TPU, flavour
	// vllm-tpu), half the replicas each: what a cost-aware router
	// chooses between.
	TopologyMixed = "mixed"
)

// DefaultCPUTierFactor sizes the cpu-tier topology's host tier against
// HBM: hosts carry several times their accelerators' memory.
const DefaultCPUTierFactor = 4

// The mixed topology's pools.
var mixedPools = []struct{ name, accelerator, flavor string }{
	{"gpu", "h200", FlavorVLLM},
	{"tpu", "tpu-v6e", FlavorVLLMTPU},
}

// Topology is a simulated fleet to start: its engines' config, how many,
// and how they split into pools.
type Topology struct {
	// Config configures every engine; a pool's role, and the mixed
	// topology's accelerators and flavours, replace its own.
	Config Config
	// Replicas is the number of engines in all.
	Replicas int
	// Prefill > 0 is the P/D topology: Prefill engines of role prefill,
	// Replicas − Prefill of role decode.
	Prefill int
	// Mixed splits the replicas between the mixed topology's pools.
	Mixed bool
	// TokenizerDir is the model directory Config.Tokenizer was loaded
	// from, which the processes apart load too; "" for the simulator's
	// rules.
	TokenizerDir string
	// Apart runs the replicas in processes of their own, Apart[i] of them
	// in process i (the aggregated topology only, without a shared tier).
	// Empty: in this process. A process is a machine of its own to the Go
	// scheduler: engines in different processes take no scheduler time
	// from each other's requests, as engines on different accelerators do
	// not.
	Apart []int
	// Spawn makes the command of one process apart: this program's
	// `turnpike sim` with args. Required with Apart.
	Spawn func(ctx context.Context, args []string) (*exec.Cmd, error)
}

// NewTopology is the topology called name (TopologyAggregated when "")
// of replicas engines configured by cfg; prefill is the P/D topology's
// prefill replicas (0: half).
func NewTopology(name string, cfg Config, replicas, prefill int) (*Topology, error) {
	t := &Topology{Config: cfg, Replicas: replicas}
	switch name {
	case "", TopologyAggregated:
	case TopologyHBM:
		t.Config.KVCPUBlocks, t.Config.KVDiskBlocks, t.Config.KVSharedBlocks = 0, 0, 0
	case TopologyCPUTier:
		if t.Config.KVCPUBlocks == 0 {
			n, err := HBMBlocks(&t.Config)
			if err != nil {
				return nil, err
			}
			t.Config.KVCPUBlocks = DefaultCPUTierFactor * n
		}
	case TopologyPD:
		t.Prefill = prefill
		if t.Prefill == 0 {
			t.Prefill = replicas / 2
		}
		if t.Prefill < 1 || t.Prefill >= replicas {
			return nil, fmt.Errorf("sim topology pd: %d prefill replicas of %d: want at least one prefill and one decode replica", t.Prefill, replicas)
		}
	case TopologyMixed:
		if replicas < len(mixedPools) {
			return nil, fmt.Errorf("sim topology mixed: %d replicas: want at least one per pool (%d)", replicas, len(mixedPools))
		}
		for _, mp := range mixedPools {
			c := t.Config
			c.Accelerator, c.Flavor = mp.accelerator, mp.flavor
			if n, err := HBMBlocks(&c); err != nil || n == 0 {
				return nil, fmt.Errorf("sim topology mixed: model %s does not fit one %s chip beside its KV cache; try --sim-model llama-3.1-8b", c.Model, mp.accelerator)
			}
		}
		t.Mixed = true
	default:
		return nil, fmt.Errorf("sim topology %q is not %s, %s, %s, %s or %s", name, TopologyAggregated, TopologyPD, TopologyHBM, TopologyCPUTier, TopologyMixed)
	}
	return t, nil
}

// HBMBlocks is the KV cache size of an engine configured by cfg, in
// blocks.
func HBMBlocks(cfg *Config) (int, error) {
	c := *cfg
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if c.NumBlocks > 0 {
		return c.NumBlocks, nil
	}
	acc, _ := accelerators.LookupAccelerator(c.Accelerator)
	model, _ := accelerators.LookupModel(c.Model)
	return accelerators.KVBlocks(acc, model, c.BlockSize, c.GPUMemoryUtilization), nil
}

// Pool is one pool of a simulated fleet: its engines' config and, once
// started, its replicas.
type Pool struct {
	// Name names the pool; Role is its engines' role ("": the config's).
	Name, Role string
	// Config configures the pool's engines.
	Config Config
	// Size is the number of engines.
	Size int
	// Replicas are the started engines, in order.
	Replicas []Replica
}

// Replica is one started engine as a gateway reaches it, and as
// `turnpike sim --report-json` prints it.
type Replica struct {
	URL              string `json:"url"`
	KVEvents         string `json:"kv_events,omitempty"`
	KVCapacityTokens int    `json:"kv_capacity_tokens"`
}

// Replicas are the fleet's engines as a gateway reaches them.
func (f *Fleet) Replicas() []Replica {
	out := make([]Replica, len(f.URLs))
	for i, u := range f.URLs {
		e := f.Engine(i)
		out[i] = Replica{URL: u, KVEvents: e.KVEventsAddr(), KVCapacityTokens: e.NumBlocks() * e.Config().BlockSize}
	}
	return out
}

// Pools are the topology's pools, not yet started.
func (t *Topology) Pools() []Pool {
	if t.Prefill > 0 {
		pre, dec := t.Config, t.Config
		pre.Name, dec.Name = "prefill", "decode"
		return []Pool{
			{Name: "prefill", Role: RolePrefill, Config: pre, Size: t.Prefill},
			{Name: "decode", Role: RoleDecode, Config: dec, Size: t.Replicas - t.Prefill},
		}
	}
	if t.Mixed {
		var out []Pool
		for i, mp := range mixedPools {
			n := t.Replicas / len(mixedPools)
			if i < t.Replicas%len(mixedPools) {
				n++
			}
			c := t.Config
			c.Name, c.Accelerator, c.Flavor = mp.name, mp.accelerator, mp.flavor
			out = append(out, Pool{Name: mp.name, Role: RoleBoth, Config: c, Size: n})
		}
		return out
	}
	return []Pool{{Name: "sim", Role: RoleBoth, Config: t.Config, Size: t.Replicas}}
}

// Fleets is the topology's simulated fleet, not yet started.
func (t *Topology) Fleets() *Fleets {
	f := NewFleets(t.Pools())
	if len(t.Apart) > 0 {
		f.apart = t
	}
	return f
}

// Fleets is a simulated fleet of one or more pools: a Fleet per pool in
// this process, or processes apart. Replicas are numbered across the pools
// in order. Create it with NewFleets or Topology.Fleets; Start starts the
// engines, Close stops them.
type Fleets struct {
	// Pools are the pools; Start fills their replicas.
	Pools []Pool
	// apart is the topology whose replicas run in processes apart; nil
	// runs them in this process.
	apart *Topology
	// fleets are the pools' engines in this process, parallel to Pools;
	// empty when they run apart.
	fleets []*Fleet
	// procs are the processes apart, in order.
	procs     []*exec.Cmd
	stopProcs context.CancelFunc
	closeOnce sync.Once
}

// NewFleets is the fleet of the pools ps, each run in this process on
// ephemeral loopback ports.
func NewFleets(ps []Pool) *Fleets {
	return &Fleets{Pools: slices.Clone(ps)}
}

// Start starts the engines of every pool. They run until Close, whatever
// becomes of ctx. On an error, what had started is stopped.
func (f *Fleets) Start(ctx context.Context) error {
	if f.apart != nil {
		return f.startApart(ctx)
	}
	for i := range f.Pools {
		p := &f.Pools[i]
		if p.Role != "" {
			p.Config.Role = p.Role
		}
		fl, err := StartFleet(context.WithoutCancel(ctx), p.Size, p.Config, "127.0.0.1", 0)
		if err != nil {
			f.Close(ctx)
			return err
		}
		p.Replicas = fl.Replicas()
		f.fleets = append(f.fleets, fl)
	}
	return nil
}

// startApart starts the topology's replicas in `turnpike sim` processes,
// Apart[i] in process i, serving the one pool.
func (f *Fleets) startApart(ctx context.Context) (err error) {
	t := f.apart
	if t.Prefill > 0 || t.Mixed || t.Config.KVSharedBlocks > 0 {
		// A shared tier is one store in one process.
		return fmt.Errorf("sim: only the aggregated topology without a shared KV tier runs its engines apart")
	}
	if t.Spawn == nil {
		return errors.New("sim: engines apart need Topology.Spawn")
	}
	c := &t.Config
	flags := []string{
		"--flavor", c.Flavor, "--accelerator", c.Accelerator, "--model", c.Model, "--served-model", c.ServedModelName,
		"--time-scale", strconv.FormatFloat(c.TimeScale, 'g', -1, 64), "--num-blocks", strconv.Itoa(c.NumBlocks),
		"--kv-cpu-blocks", strconv.Itoa(c.KVCPUBlocks), "--kv-disk-blocks", strconv.Itoa(c.KVDiskBlocks),
		"--scheduling-policy", c.SchedulingPolicy,
	}
	if t.TokenizerDir != "" {
		flags = append(flags, "--tokenizer", t.TokenizerDir)
	}
	if c.KVEventsAddr != "" {
		flags = append(flags, "--kv-events")
	}
	// The processes outlive ctx until Close, which stops them.
	procs, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stopProcs = stop
	defer func() {
		if err != nil {
			f.Close(ctx)
		}
	}()
	pool := &f.Pools[0]
	first := 0
	for _, n := range t.Apart {
		args := append([]string{"-n", strconv.Itoa(n), "--first-engine", strconv.Itoa(first), "--base-port", "0", "--report-json"}, flags...)
		first += n
		cmd, err := t.Spawn(procs, args)
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("sim: engine process: %w", err)
		}
		f.procs = append(f.procs, cmd)
		var engines []Replica
		line, err := bufio.NewReader(out).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &engines)
		}
		if err != nil || len(engines) != n {
			return fmt.Errorf("sim: engine process: reading its %d engines: %v", n, err)
		}
		pool.Replicas = append(pool.Replicas, engines...)
	}
	return nil
}

// KVCapacityTokens is the fleet's KV cache in tokens, every replica's.
func (f *Fleets) KVCapacityTokens() int {
	n := 0
	for _, p := range f.Pools {
		for _, r := range p.Replicas {
			n += r.KVCapacityTokens
		}
	}
	return n
}

// URLs are every replica's base URL.
func (f *Fleets) URLs() []string {
	var out []string
	for _, p := range f.Pools {
		for _, r := range p.Replicas {
			out = append(out, r.URL)
		}
	}
	return out
}

// Engines are every replica's engine in this process.
func (f *Fleets) Engines() []*Engine {
	var out []*Engine
	for _, fl := range f.fleets {
		out = append(out, fl.Engines...)
	}
	return out
}

// Fleet is pool i's fleet in this process; nil when the pools run apart.
func (f *Fleets) Fleet(i int) *Fleet {
	if i >= len(f.fleets) {
		return nil
	}
	return f.fleets[i]
}

// Processes are the processes apart, in order; none when the pools run
// in this process.
func (f *Fleets) Processes() []*exec.Cmd { return f.procs }

func (f *Fleets) locate(i int) (*Fleet, int, error) {
	for _, fl := range f.fleets {
		if i < len(fl.URLs) {
			return fl, i, nil
		}
		i -= len(fl.URLs)
	}
	if len(f.procs) > 0 {
		return nil, 0, fmt.Errorf("sim: replica %d runs in a process of its own", i)
	}
	return nil, 0, fmt.Errorf("sim: no replica %d", i)
}

// Kill stops replica i (Fleet.Kill).
func (f *Fleets) Kill(i int) error {
	fl, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return fl.Kill(j)
}

// Restart starts replica i again (Fleet.Restart).
func (f *Fleets) Restart(i int) error {
	fl, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return fl.Restart(j)
}

// Close stops every replica: the fleets in this process, and the
// processes apart, interrupted and waited for; their commands
// (Topology.Spawn) bound how long each takes to exit, not ctx.
func (f *Fleets) Close(context.Context) error {
	var errs []error
	for _, fl := range f.fleets {
		errs = append(errs, fl.Close())
	}
	f.closeOnce.Do(func() {
		if f.stopProcs == nil {
			return
		}
		f.stopProcs()
		for _, cmd := range f.procs {
			// Interrupted, it exits with status 0, which Wait reports as
			// the cancellation; killed, with an error that says so.
			if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("sim: engine process: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}
