package kv

import "time"

// TierCredit is what a block found in a tier saves against recomputing it,
// relative to a block in HBM (which saves the whole recompute): 1 −
// load/recompute, in [0, 1]. A load as slow as the recompute saves
// nothing; so does a tier whose load time is unknown (negative).
func TierCredit(recompute, load time.Duration) float64 {
	if recompute <= 0 || load < 0 {
		return 0
	}
	return min(max(1-float64(load)/float64(recompute), 0), 1)
}

// SavingsWeights derives tier weights from the time to recompute one block
// and the time to load one block from each tier into HBM (load[HBM] is
// normally 0): each tier's TierCredit. It is how a scorer values a hit by
// the prefill time it saves rather than by fixed weights.
func SavingsWeights(recompute time.Duration, load [NumTiers]time.Duration) TierWeights {
	var w TierWeights
	for t := range NumTiers {
		w[t] = TierCredit(recompute, load[t])
	}
	return w
}
