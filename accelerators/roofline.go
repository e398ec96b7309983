package accelerators

import (
	"math"
	"time"
)

// Roofline efficiencies: the fraction of a peak that a real engine reaches.
const (
	// PrefillMFU is the model FLOP utilisation of prefill. Prefill is a
	// large matrix multiply per layer and is compute-bound; tuned engines
	// reach 40–60% of peak on long prompts (attention, norms and launch
	// overheads take the rest), so 0.5.
	PrefillMFU = 0.5
	// DecodeMBU is the memory bandwidth utilisation of a decode step.
	// Decode streams every weight and the batch's KV cache through the
	// chip once per token; good kernels reach 60–80% of HBM bandwidth,
	// so 0.7.
	DecodeMBU = 0.7
	// DecodeMFU is the compute efficiency of decode's matrix multiplies
	// once the batch is large enough to be compute-bound; skinny matrices
	// keep it below prefill's.
	DecodeMFU = 0.4
)

// WeightBytes is the size of the model's weights in accelerator memory.
func (m Model) WeightBytes() float64 { return m.Params * m.BytesPerParam }

// KVBytesPerToken is the KV cache footprint of one token: a key and a value
// vector per KV head per layer, 2 × layers × kvHeads × headDim × bytes.
func (m Model) KVBytesPerToken() float64 {
	return 2 * float64(m.Layers) * float64(m.KVHeads) * float64(m.HeadDim) * m.BytesPerParam
}

// KVBlocks is the number of KV cache blocks of blockSize tokens that fit on
// acc beside model's weights when the engine may use gpuMemUtil (0..1) of
// HBM, as vLLM sizes its cache. It is 0 when the weights do not fit or the
// arguments are not positive. Activation memory is not modelled.
func KVBlocks(acc Accelerator, model Model, blockSize int, gpuMemUtil float64) int {
	if blockSize <= 0 || gpuMemUtil <= 0 {
		return 0
	}
	free := acc.HBMBytes*gpuMemUtil - model.WeightBytes()
	block := float64(blockSize) * model.KVBytesPerToken()
	if free <= 0 || block <= 0 {
		return 0
	}
	return int(math.Floor(free / block))
}

// PrefillTime is the time to prefill tokens new prompt tokens in one step:
// compute-bound, 2 × activeParams FLOPs per token at PrefillMFU of peak.
// Attention's quadratic term is left out; for the prompt lengths agents send
// it is small beside the weight multiplies.
func PrefillTime(acc Accelerator, model Model, tokens int) time.Duration {
	if tokens <= 0 || acc.PeakFLOPS <= 0 {
		return 0
	}
	flops := 2 * model.ActiveParams * float64(tokens)
	return seconds(flops / (acc.PeakFLOPS * PrefillMFU))
}

// DecodeStepTime is the time of one decode step for batch sequences whose
// contexts add up to contextTokens tokens. Decode is bandwidth-bound: each
// step reads every weight once (a large batch touches every expert of a
// mixture of experts, so all Params count) plus the KV cache of every
// context, at DecodeMBU of HBM bandwidth. For very large batches the step
// becomes compute-bound (2 × activeParams FLOPs per sequence at DecodeMFU);
// the step takes the larger of the two.
func DecodeStepTime(acc Accelerator, model Model, batch int, contextTokens int) time.Duration {
	if batch <= 0 || acc.HBMBandwidth <= 0 {
		return 0
	}
	bytes := model.WeightBytes() + model.KVBytesPerToken()*float64(max(contextTokens, 0))
	memory := bytes / (acc.HBMBandwidth * DecodeMBU)
	var compute float64
	if acc.PeakFLOPS > 0 {
		compute = 2 * model.ActiveParams * float64(batch) / (acc.PeakFLOPS * DecodeMFU)
	}
	return seconds(max(memory, compute))
}

// HostTransferTime is the time to move n bytes over acc's host link, the
// cost of a KV cache hit in host memory instead of a recompute.
func HostTransferTime(acc Accelerator, bytes float64) time.Duration {
	if bytes <= 0 || acc.HostLinkBandwidth <= 0 {
		return 0
	}
	return seconds(bytes / acc.HostLinkBandwidth)
}

func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s * float64(time.Second)))
}
