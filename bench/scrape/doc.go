// Package scrape reads what the engines and the gateway say about
// themselves in their Prometheus /metrics, for the bench's figures.
//
// # Overview
//
// One scrape of an engine is an EngineMetrics: every counter, gauge and
// untyped sample summed over label sets, keyed by family name without a
// _total suffix (Key), with the engines' latency histograms' buckets and
// the numeric labels of their cache-config info kept too. The metric
// names are accelerators/enginemetrics', vLLM's and SGLang's alike.
// Delta turns scrapes before and after a run into the engines' own
// account of it (EngineCache: prefix-cache hit rate, tokens, load spread,
// ITL and TTFT quantiles from their histograms); FiguresBetween is one
// engine's share. SampleOccupancy samples the engines and the gateway's
// queue through a run, a second apart on the fleet's clock (Occupancy,
// idle-while-queued); ScrapeGateway reads the gateway's migration and retry counters.
//
// # How data enters and leaves
//
// Data enters over HTTP (All, One, ScrapeGateway) or from a reader
// (ParseEngineMetrics, ParseGatewayCounters), a body read up to 32 MiB;
// it leaves as plain values that marshal to JSON. Figures that come out
// NaN or infinite are dropped, so a result always marshals.
//
// # Concurrency model
//
// The functions are safe for concurrent use. SampleOccupancy runs one
// goroutine until the stop it returns is called, which joins it.
package scrape
