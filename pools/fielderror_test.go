package pools

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"
)

func TestFieldErrors(t *testing.T) {
	err := fmt.Errorf("config: %w", errors.Join(
		FieldErrorf("pools[0].name", "required"),
		errors.New("not a field"),
		fmt.Errorf("routing: %w", errors.Join(FieldErrorf("policy", "unknown"), &FieldError{Field: "maxQueue", Message: "-1 is negative"})),
	))
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field+"="+fe.Message)
	}
	if want := []string{"pools[0].name=required", "policy=unknown", "maxQueue=-1 is negative"}; !slices.Equal(got, want) {
		t.Errorf("FieldErrors = %v, want %v", got, want)
	}
	if FieldErrors(nil) != nil || FieldErrors(errors.New("x")) != nil {
		t.Error("FieldErrors of an error without any is not empty")
	}
	if got := FieldErrorf("pools[1].role", "%q is not both", "x").Error(); got != `pools[1].role: "x" is not both` {
		t.Errorf("FieldErrorf text %q", got)
	}
}

// TestValidatePoolsNamesFields: every problem is a FieldError naming its
// field as the config file spells it.
func TestValidatePoolsNamesFields(t *testing.T) {
	err := ValidatePools([]PoolConfig{
		{Name: "a", Engine: "tgi", Endpoints: []EndpointConfig{{URL: "ftp://x"}}},
		{Name: "a", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://h:1", KVEvents: "udp://x"}, {URL: "http://h:2", BootstrapPort: 70000}}},
	})
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	want := []string{"pools[0].engine", "pools[0].servedModels", "pools[0].endpoints[0].url", "pools[1].name", "pools[1].endpoints[0].kvEvents", "pools[1].endpoints[1].bootstrapPort"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v\n%v", got, want, err)
	}
	if fes := FieldErrors(ValidatePools(nil)); len(fes) != 1 || fes[0].Field != "pools" {
		t.Errorf("no pools: %v", fes)
	}
}

func TestValidatePoolsTokenizer(t *testing.T) {
	pool := func(name string, models []string, tc TokenizerConfig) PoolConfig {
		return PoolConfig{Name: name, ServedModels: models, Tokenizer: tc, Endpoints: []EndpointConfig{{URL: "http://" + name + ":8000"}}}
	}
	hf := TokenizerConfig{Kind: TokenizerHF, Path: "/models/qwen3"}
	for _, tc := range []struct {
		name  string
		pools []PoolConfig
		want  []string
	}{
		{"default and approximate agree", []PoolConfig{pool("a", []string{"m"}, TokenizerConfig{}), pool("b", []string{"m"}, TokenizerConfig{Kind: TokenizerApproximate})}, nil},
		{"hf on every pool", []PoolConfig{pool("a", []string{"m"}, hf), pool("b", []string{"m", "n"}, hf)}, nil},
		{"engine", []PoolConfig{pool("a", []string{"m"}, TokenizerConfig{Kind: TokenizerEngine})}, nil},
		{"unknown kind", []PoolConfig{pool("a", []string{"m"}, TokenizerConfig{Kind: "sentencepiece"})}, []string{"pools[0].tokenizer.kind"}},
		{"hf without a path", []PoolConfig{pool("a", []string{"m"}, TokenizerConfig{Kind: TokenizerHF})}, []string{"pools[0].tokenizer.path"}},
		{"a path for engine", []PoolConfig{pool("a", []string{"m"}, TokenizerConfig{Kind: TokenizerEngine, Path: "/x"})}, []string{"pools[0].tokenizer.path"}},
		{"pools of a model disagree", []PoolConfig{pool("a", []string{"m"}, hf), pool("b", []string{"n"}, TokenizerConfig{}), pool("c", []string{"n", "m"}, TokenizerConfig{})}, []string{"pools[2].tokenizer"}},
		{"paths disagree", []PoolConfig{pool("a", []string{"m"}, hf), pool("b", []string{"m"}, TokenizerConfig{Kind: TokenizerHF, Path: "/models/other"})}, []string{"pools[1].tokenizer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, fe := range FieldErrors(ValidatePools(tc.pools)) {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("fields %v, want %v", got, tc.want)
			}
		})
	}
}

// TestValidateKubernetesLabelKeys: the pod label keys kind kubernetes
// reads by must be label keys; every bad one is reported.
func TestValidateKubernetesLabelKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    DiscoveryConfig
		want []string
	}{
		{"defaults", DiscoveryConfig{}, nil},
		{"named keys", DiscoveryConfig{RevisionLabel: "release", ModelsLabel: "example.com/models", AcceleratorLabel: "gpu"}, nil},
		{"bad keys", DiscoveryConfig{ModelsLabel: "models list", AcceleratorLabel: "a/b/c"},
			[]string{"pools[0].discovery.modelsLabel", "pools[0].discovery.acceleratorLabel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d
			d.Kind, d.Selector, d.Ports = DiscoveryKubernetes, "app=vllm", []int{8000}
			var got []string
			for _, fe := range FieldErrors(ValidatePools([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Discovery: &d}})) {
				got = append(got, fe.Field)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("fields %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEndpointBootstrapPort: an endpoint's SGLang bootstrap port is its
// config's, or SGLang's default 8998.
func TestEndpointBootstrapPort(t *testing.T) {
	reg, err := NewRegistry([]PoolConfig{{Name: "p", Engine: EngineSGLang, Role: RolePrefill, ServedModels: []string{"m"},
		Endpoints: []EndpointConfig{{URL: "http://a:30000"}, {URL: "http://b:30000", BootstrapPort: 9001}}},
		{Name: "d", Engine: EngineSGLang, Role: RoleDecode, ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://c:30001"}}}},
		Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := reg.Endpoints()[0].BootstrapPort, reg.Endpoints()[1].BootstrapPort; a != DefaultBootstrapPort || b != 9001 {
		t.Errorf("bootstrap ports %d, %d; want %d, 9001", a, b, DefaultBootstrapPort)
	}
}
