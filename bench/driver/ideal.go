package driver

import (
	"slices"

	"github.com/turnpike-gateway/turnpike/bench/workload"
	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Methods of IdealReuse.
const (
	// IdealWorkload is the agentic ideal: what an unbounded cache would
	// hold of each prompt from earlier requests of the run.
	IdealWorkload = "workload"
	// IdealGlobalLRU is the trace ideal: one LRU cache of the fleet's total
	// capacity, replayed over the trace's hash ids in order.
	IdealGlobalLRU = "global-lru"
)

// idealBlockSize is the prefix-cache block of the agentic ideal, in tokens:
// vLLM's default and the simulated engines'. Only whole blocks are reused.
const idealBlockSize = 16

// IdealReuse is the prefix reuse a router could at best have won on a run:
// the yardstick of the engines' own hit rate. A router that sends every
// request to the replica holding its prefix, on replicas that keep it,
// captures all of it.
type IdealReuse struct {
	// Method is "workload" (agentic) or "global-lru" (trace).
	Method string `json:"method"`
	// CapacityTokens is the global LRU's size for "global-lru"; 0 means
	// unbounded.
	CapacityTokens int `json:"capacity_tokens,omitempty"`
	// PromptTokens are the requests' prompt tokens, CachedTokens the share
	// of them the ideal cache serves.
	PromptTokens float64 `json:"prompt_tokens"`
	CachedTokens float64 `json:"cached_tokens"`
	// HitRate is CachedTokens / PromptTokens.
	HitRate float64 `json:"hit_rate"`
	// CapturedShare is the engines' hit rate over HitRate: 1 is all of the
	// ideal. 0 when either is unknown.
	CapturedShare float64 `json:"captured_share"`
}

// setIdeal records ideal in r and, when the engines counted hits, the
// share of it they captured.
func (r *Result) setIdeal(ideal IdealReuse) {
	if ideal.PromptTokens > 0 {
		ideal.HitRate = ideal.CachedTokens / ideal.PromptTokens
	}
	if ideal.HitRate > 0 && r.Engines != nil && r.Engines.Flavor != "" {
		ideal.CapturedShare = r.Engines.HitRate / ideal.HitRate
	}
	r.Ideal = &ideal
}

// IdealAgenticReuse is the ideal of an agentic run, from what was actually
// sent and answered: for each successful request, the whole blocks of its
// prompt that an unbounded cache would already hold from earlier requests.
// That is the previous answered turn of its session (its prompt and its
// answer, which the next prompt repeats), or for a session's first turn the
// tenant's shared system prompt and tool schema once any earlier request of
// the tenant carried it. Never more than the prompt less its last token,
// which an engine must compute. Token counts are the usage the gateway
// reported; failed requests count for nothing.
func IdealAgenticReuse(cfg workload.Config, samples []*Sample, blockSize int) IdealReuse {
	return idealAgenticReuse(cfg, samples, blockSize, nil)
}

// idealAgenticReuse is IdealAgenticReuse with the system prompt's tokens
// counted by systemTokens (Target.SystemTokens); nil counts them as
// systemPromptTokens does.
func idealAgenticReuse(cfg workload.Config, samples []*Sample, blockSize int, systemTokens func(string) int) IdealReuse {
	ideal := IdealReuse{Method: IdealWorkload}
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b *Sample) int { return int(a.Start - b.Start) })
	floor := func(n int) int { return max(n, 0) / blockSize * blockSize }
	a := cfg.Agentic
	prev := map[string]*Sample{} // last answered turn of each session
	seen := map[string]bool{}    // tenants whose system prompt was sent
	counted := map[string]int{}  // systemTokens of each tenant's prompt
	shared := func(label string) int {
		if systemTokens == nil {
			return systemPromptTokens(label, a.SystemPromptTokens, a.ToolSchemaTokens)
		}
		n, ok := counted[label]
		if !ok {
			if tenant, ok := tenantNumber(label); ok {
				n = systemTokens(workload.SystemPrompt(tenant, a.SystemPromptTokens, a.ToolSchemaTokens))
			}
			counted[label] = n
		}
		return n
	}
	for _, s := range sorted {
		if s.Error != "" || s.InputTokens <= 0 {
			continue
		}
		var hit int
		if p := prev[s.Session]; p != nil && s.Session != "" {
			hit = p.InputTokens + p.OutputTokens
		} else if seen[s.Tenant] {
			hit = shared(s.Tenant)
		}
		hit = min(floor(hit), floor(s.InputTokens-1))
		ideal.PromptTokens += float64(s.InputTokens)
		ideal.CachedTokens += float64(hit)
		seen[s.Tenant] = true
		if s.Session != "" {
			prev[s.Session] = s
		}
	}
	return ideal
}

// systemPromptTokens is the length of tenant label's system message as the
// chat template renders it ("<|system|>\n" and the text), in whole tokens
// of 4 bytes; 0 for a label that is not "t<n>".
func systemPromptTokens(label string, systemTokens, schemaTokens int) int {
	tenant, ok := tenantNumber(label)
	if !ok {
		return 0
	}
	return (len("<|system|>\n") + len(workload.SystemPrompt(tenant, systemTokens, schemaTokens))) / 4
}

// tenantNumber reads a tenant label "t<n>".
func tenantNumber(label string) (int, bool) {
	var tenant int
	for i, c := range label {
		if i == 0 {
			if c != 't' {
				return 0, false
			}
			continue
		}
		if c < '0' || c > '9' {
			return 0, false
		}
		tenant = tenant*10 + int(c-'0')
	}
	return tenant, len(label) >= 2
}

// IdealTraceReuse is the share of reqs' prompt tokens one global LRU cache
// of capacityTokens (0: unbounded) would serve, replaying the requests in
// order over their 512-token hash-id blocks: each request hits the longest
// run of its leading blocks the cache holds, then every block of its prompt
// becomes the most recently used. This is how the Mooncake README states the
// ideal by fleet capacity.
func IdealTraceReuse(reqs []workload.TraceRequest, capacityTokens int) IdealReuse {
	ideal := IdealReuse{Method: IdealGlobalLRU, CapacityTokens: capacityTokens}
	capBlocks := capacityTokens / workload.BlockTokens
	cache := lru.NewCache[int64, struct{}](int64(capBlocks), nil) // 0 or less: no bound
	for _, q := range reqs {
		hits := 0
		for _, id := range q.HashIDs {
			if _, ok := cache.Peek(id); !ok {
				break
			}
			hits++
		}
		ideal.PromptTokens += float64(q.InputTokens)
		ideal.CachedTokens += float64(min(hits*workload.BlockTokens, q.InputTokens))
		for _, id := range q.HashIDs {
			cache.Add(id, struct{}{})
		}
	}
	return ideal
}
