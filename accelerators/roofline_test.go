package accelerators

import (
	"testing"
	"time"
)

func mustAcc(t *testing.T, name string) Accelerator {
	t.Helper()
	a, ok := LookupAccelerator(name)
	if !ok {
		t.Fatalf("accelerator %q not in catalog", name)
	}
	return a
}

func mustModel(t *testing.T, name string) Model {
	t.Helper()
	m, ok := LookupModel(name)
	if !ok {
		t.Fatalf("model %q not in catalog", name)
	}
	return m
}

func TestCatalogComplete(t *testing.T) {
	for _, name := range []string{"h100", "h200", "b200", "mi300x", "tpu-v6e", "tpu7x"} {
		a := mustAcc(t, name)
		if a.Name != name || a.HBMBytes <= 0 || a.PeakFLOPS <= 0 || a.HBMBandwidth <= 0 ||
			a.HostLinkBandwidth <= 0 || a.DollarsPerHour <= 0 {
			t.Errorf("%s: incomplete profile %+v", name, a)
		}
	}
	for _, name := range []string{"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "qwen3-30b-a3b"} {
		m := mustModel(t, name)
		if m.Name != name || m.Params <= 0 || m.ActiveParams <= 0 || m.ActiveParams > m.Params ||
			m.Layers <= 0 || m.KVHeads <= 0 || m.HeadDim <= 0 || m.BytesPerParam != 2 || m.ContextLength <= 0 {
			t.Errorf("%s: incomplete profile %+v", name, m)
		}
	}
	if _, ok := LookupAccelerator("H100"); !ok {
		t.Error("lookup is not case-insensitive")
	}
	if got := len(AcceleratorNames()); got != len(accelerators) {
		t.Errorf("AcceleratorNames: %d names, want %d", got, len(accelerators))
	}
}

func TestKVBytesPerToken(t *testing.T) {
	tests := []struct {
		model string
		want  float64
	}{
		{"llama-3.1-8b", 2 * 32 * 8 * 128 * 2},  // 128 KiB
		{"llama-3.1-70b", 2 * 80 * 8 * 128 * 2}, // 320 KiB
		{"qwen3-32b", 2 * 64 * 8 * 128 * 2},
		{"qwen3-30b-a3b", 2 * 48 * 4 * 128 * 2},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			if got := mustModel(t, tt.model).KVBytesPerToken(); got != tt.want {
				t.Errorf("KVBytesPerToken = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestKVBlocks(t *testing.T) {
	tests := []struct {
		name      string
		acc       string
		model     string
		blockSize int
		util      float64
		want      int
	}{
		// (80e9×0.9 − 16.06e9) / (16 × 131072) = 26674.27
		{"h100 8b", "h100", "llama-3.1-8b", 16, 0.9, 26674},
		// (192e9×0.9 − 141.2e9) / (16 × 327680) = 6027.22
		{"mi300x 70b", "mi300x", "llama-3.1-70b", 16, 0.9, 6027},
		// 141e9×0.9 = 126.9e9 < 141.2e9 of weights
		{"h200 70b does not fit", "h200", "llama-3.1-70b", 16, 0.9, 0},
		{"zero block size", "h100", "llama-3.1-8b", 0, 0.9, 0},
		{"zero util", "h100", "llama-3.1-8b", 16, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := KVBlocks(mustAcc(t, tt.acc), mustModel(t, tt.model), tt.blockSize, tt.util)
			if got != tt.want {
				t.Errorf("KVBlocks = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestStepTimes(t *testing.T) {
	tests := []struct {
		name string
		got  func(a Accelerator, m Model) time.Duration
		acc  string
		mdl  string
		want time.Duration
	}{
		{
			// 2 × 8.03e9 × 1000 / (989e12 × 0.5) = 32.4772 ms
			name: "prefill h100 8b 1000 tokens",
			got:  func(a Accelerator, m Model) time.Duration { return PrefillTime(a, m, 1000) },
			acc:  "h100", mdl: "llama-3.1-8b", want: 32477250 * time.Nanosecond,
		},
		{
			// MoE counts active params: 2 × 3.3e9 × 2048 / (989e12 × 0.5) = 27.3343 ms
			name: "prefill h200 qwen3-30b-a3b 2048 tokens",
			got:  func(a Accelerator, m Model) time.Duration { return PrefillTime(a, m, 2048) },
			acc:  "h200", mdl: "qwen3-30b-a3b", want: 27334277 * time.Nanosecond,
		},
		{
			// (16.06e9 + 131072 × 32000) / (3.35e12 × 0.7) = 8.63723 ms
			name: "decode h100 8b batch 32 × 1000",
			got:  func(a Accelerator, m Model) time.Duration { return DecodeStepTime(a, m, 32, 32000) },
			acc:  "h100", mdl: "llama-3.1-8b", want: 8637230 * time.Nanosecond,
		},
		{
			// (141.2e9 + 327680 × 32000) / (5.3e12 × 0.7) = 40.8856 ms
			name: "decode mi300x 70b batch 8 × 4000",
			got:  func(a Accelerator, m Model) time.Duration { return DecodeStepTime(a, m, 8, 32000) },
			acc:  "mi300x", mdl: "llama-3.1-70b", want: 40885650 * time.Nanosecond,
		},
		{
			// memory 61e9 / 3.36e12 = 18.2 ms < compute
			// 2 × 3.3e9 × 4096 / (989e12 × 0.4) = 68.3357 ms
			name: "decode h200 moe compute-bound",
			got:  func(a Accelerator, m Model) time.Duration { return DecodeStepTime(a, m, 4096, 0) },
			acc:  "h200", mdl: "qwen3-30b-a3b", want: 68335693 * time.Nanosecond,
		},
		{
			name: "empty decode",
			got:  func(a Accelerator, m Model) time.Duration { return DecodeStepTime(a, m, 0, 0) },
			acc:  "h100", mdl: "llama-3.1-8b", want: 0,
		},
		{
			name: "empty prefill",
			got:  func(a Accelerator, m Model) time.Duration { return PrefillTime(a, m, 0) },
			acc:  "h100", mdl: "llama-3.1-8b", want: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.got(mustAcc(t, tt.acc), mustModel(t, tt.mdl))
			if d := got - tt.want; d > time.Microsecond || d < -time.Microsecond {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHostTransferTime(t *testing.T) {
	// One 16-token block of llama-3.1-8b over PCIe Gen5: 2 MiB / 64 GB/s = 32.768 µs.
	m := mustModel(t, "llama-3.1-8b")
	got := HostTransferTime(mustAcc(t, "h100"), 16*m.KVBytesPerToken())
	if got != 32768*time.Nanosecond {
		t.Errorf("HostTransferTime = %v, want 32.768µs", got)
	}
}
