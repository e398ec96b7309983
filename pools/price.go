package pools

import "github.com/turnpike-gateway/turnpike/accelerators"

// The pool's hardware as routing prices it: list price and roofline
// throughput from the accelerator and model profiles of its config. Each
// is 0 when the config names no profile (or no price), which callers read
// as unknown.

// DollarsPerHour is the list price of one of the pool's chips per hour
// (accelerators catalog); 0 when the pool names no accelerator.
func (p *Pool) DollarsPerHour() float64 { return p.Accelerator.DollarsPerHour }

// RooflinePrefillRate is the pool's prefill throughput by the roofline, in
// prompt tokens per second of one replica: compute-bound, at
// accelerators.PrefillMFU. 0 when the pool names no accelerator or model.
func (p *Pool) RooflinePrefillRate() float64 {
	const tokens = 8192 // one full step: the compute-bound rate
	d := accelerators.PrefillTime(p.Accelerator, p.Model, tokens)
	if d <= 0 || p.Model.ActiveParams <= 0 {
		return 0
	}
	return tokens / d.Seconds()
}

// RooflineDecodeRate is the pool's decode throughput by the roofline, in
// output tokens per second of one replica running batch sequences of
// contextTokens each: bandwidth-bound at accelerators.DecodeMBU, or
// compute-bound for large batches. 0 when the pool names no accelerator
// or model.
func (p *Pool) RooflineDecodeRate(batch, contextTokens int) float64 {
	if batch <= 0 || p.Model.Params <= 0 {
		return 0
	}
	d := accelerators.DecodeStepTime(p.Accelerator, p.Model, batch, batch*contextTokens)
	if d <= 0 {
		return 0
	}
	return float64(batch) / d.Seconds()
}
