// Package enginemetrics names the Prometheus series the model servers
// export on /metrics, and the labels of their cache config info: the one
// spelling of each, for pools (which scrapes real engines), sim (which
// exports them as an engine would) and bench (which reads them back).
//
// # Overview
//
// Names are as an engine's text exposition spells its samples: counters
// with their _total suffix, histograms by their family name (the samples
// add _bucket, _sum and _count). vLLM's names come in two generations:
// vLLM v0.10 renamed the KV cache series (gpu_cache_usage_perc became
// kv_cache_usage_perc, gpu_prefix_cache_* became prefix_cache_*), and
// images built on older releases, TPU ones among them, still export the
// gpu_ spellings. SGLang's cache config info names the same quantities as
// vLLM's with labels of its own.
//
// # Concurrency model
//
// Constants only.
package enginemetrics
