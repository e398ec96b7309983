package affinity

import "github.com/turnpike-gateway/turnpike/pools"

// pickerFactories build the pickers by config name.
var pickerFactories = map[string]func(*env) Picker{
	PickerMaxScore:       func(e *env) Picker { return &MaxScore{Rand: e.rand} },
	PickerWeightedRandom: func(e *env) Picker { return &WeightedRandom{Rand: e.rand} },
}

// tieEpsilon is how close two scores must be to tie: weighted sums of
// floats differ in the last bits for equal inputs.
const tieEpsilon = 1e-9

// MaxScore picks the highest score, uniformly at random among ties, so
// that an idle, cold fleet spreads its first requests.
type MaxScore struct {
	// Rand returns uniformly random bits; it must be safe for concurrent use.
	Rand func() uint64
}

// Name implements Plugin.
func (*MaxScore) Name() string { return PickerMaxScore }

// Pick implements Picker.
func (m *MaxScore) Pick(_ *Cycle, _ []*pools.Endpoint, scores []float64) int {
	best, ties := 0, 1
	for i := 1; i < len(scores); i++ {
		switch d := scores[i] - scores[best]; {
		case d > tieEpsilon:
			best, ties = i, 1
		case d >= -tieEpsilon:
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	k := int(m.Rand() % uint64(ties))
	top := scores[best]
	for i, s := range scores {
		if s-top >= -tieEpsilon {
			if k == 0 {
				return i
			}
			k--
		}
	}
	return best
}

// WeightedRandom picks at random with probability proportional to the
// score; uniformly when every score is zero.
type WeightedRandom struct {
	// Rand returns uniformly random bits; it must be safe for concurrent use.
	Rand func() uint64
}

// Name implements Plugin.
func (*WeightedRandom) Name() string { return PickerWeightedRandom }

// Pick implements Picker.
func (w *WeightedRandom) Pick(_ *Cycle, _ []*pools.Endpoint, scores []float64) int {
	var sum float64
	for _, s := range scores {
		sum += s
	}
	if sum <= 0 {
		return int(w.Rand() % uint64(len(scores)))
	}
	r := unitFloat(w.Rand()) * sum
	for i, s := range scores {
		if r < s {
			return i
		}
		r -= s
	}
	return len(scores) - 1 // rounding
}

// unitFloat maps random bits to [0, 1).
func unitFloat(bits uint64) float64 { return float64(bits>>11) / (1 << 53) }

var (
	_ Picker = (*MaxScore)(nil)
	_ Picker = (*WeightedRandom)(nil)
)
