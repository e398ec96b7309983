package workload

import (
	"strings"
	"testing"
	"time"
)

func TestLendingConfigValidate(t *testing.T) {
	cfg := Config{Workload: WorkloadLending}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Lending.ReclaimDeadline = Duration(9 * time.Second) // the idle phase is 8s
	cfg.Lending.TrainerDuty = 1
	err := cfg.Validate()
	for _, want := range []string{"lending.trainer_duty", "lending.reclaim_deadline"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want %s refused", err, want)
		}
	}
}
