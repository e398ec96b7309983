package stack

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/prompt/enginetok"
	"github.com/turnpike-gateway/turnpike/prompt/hf"
)

// modelTokenizers builds each served model's tokenizer from its pools'
// tokenizer config (validated to agree): hf loads the model directory
// once per path, with an incremental token cache; engine asks the first
// endpoint of the model's first pool. Approximate models are left out,
// for the dispatcher's default. Their metrics go to reg.
func modelTokenizers(pcs []pools.PoolConfig, reg prometheus.Registerer) (map[string]prompt.Tokenizer, error) {
	toks := map[string]prompt.Tokenizer{}
	loaded := map[string]*hf.Prompts{} // by path
	for _, pc := range pcs {
		tc := pc.Tokenizer.Normal()
		for _, model := range pc.ServedModels {
			if _, done := toks[model]; done {
				continue
			}
			switch tc.Kind {
			case pools.TokenizerHF:
				p := loaded[tc.Path]
				if p == nil {
					m, err := hf.Load(tc.Path)
					if err != nil {
						return nil, fmt.Errorf("pool %q: tokenizer: %w", pc.Name, err)
					}
					p = &hf.Prompts{Model: m}
					if tc.CacheBytes > 0 {
						p.Incremental = hf.NewIncremental(m.Tokenizer, tc.CacheBytes)
					}
					if err := reg.Register(p.Collector(prometheus.Labels{"tokenizer": tc.Path})); err != nil {
						return nil, err
					}
					loaded[tc.Path] = p
				}
				toks[model] = p
			case pools.TokenizerEngine:
				c := &enginetok.Client{BaseURL: pc.Endpoints[0].URL, Model: model}
				if err := reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
					Name:        "turnpike_engine_tokenize_failures_total",
					Help:        "Prompts the engine's /tokenize did not tokenize in time or at all; the approximate tokenizer counted them.",
					ConstLabels: prometheus.Labels{"model": model},
				}, func() float64 { return float64(c.Failures()) })); err != nil {
					return nil, err
				}
				toks[model] = c
			}
		}
	}
	return toks, nil
}
