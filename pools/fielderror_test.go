package pools

import (
	"errors"
	"fmt"
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
		{Name: "a", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://h:1", KVEvents: "udp://x"}}},
	})
	var got []string
	for _, fe := range FieldErrors(err) {
		got = append(got, fe.Field)
	}
	want := []string{"pools[0].engine", "pools[0].servedModels", "pools[0].endpoints[0].url", "pools[1].name", "pools[1].endpoints[0].kvEvents"}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v\n%v", got, want, err)
	}
	if fes := FieldErrors(ValidatePools(nil)); len(fes) != 1 || fes[0].Field != "pools" {
		t.Errorf("no pools: %v", fes)
	}
}
