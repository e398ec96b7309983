package sim

import "testing"

// TestPlanTextSoftCap: an answer whose drawn length reaches a cap the
// client set ends with "length"; one that reaches the engine's default
// cap, for a request that set none, ended on its own.
func TestPlanTextSoftCap(t *testing.T) {
	const max = 40
	seed := uint64(0)
	for ; planText(seed, max, false, false).tokens != max; seed++ {
	}
	if o := planText(seed, max, false, false); o.finish != finishLength {
		t.Errorf("a drawn length at the client's cap ended %q, want %q", o.finish, finishLength)
	}
	if o := planText(seed, max, false, true); o.finish != finishStop || o.tokens != max {
		t.Errorf("a drawn length at the default cap ended %q with %d tokens, want %q with %d", o.finish, o.tokens, finishStop, max)
	}
	if o := planText(seed, max, true, true); o.finish != finishLength {
		t.Errorf("ignore_eos at the default cap ended %q, want %q", o.finish, finishLength)
	}
}
