package driver

import "testing"

func TestGatewayMetricsURL(t *testing.T) {
	for _, tt := range []struct{ base, set, want string }{
		{"http://127.0.0.1:8080", "", "http://127.0.0.1:8080/metrics"},
		{"http://127.0.0.1:8080/v1/", "", "http://127.0.0.1:8080/metrics"},
		{"http://gw/v1", "http://gw:9090/metrics", "http://gw:9090/metrics"},
	} {
		if got := (Target{BaseURL: tt.base, GatewayMetricsURL: tt.set}).GatewayMetrics(); got != tt.want {
			t.Errorf("%q, %q: %q, want %q", tt.base, tt.set, got, tt.want)
		}
	}
}
