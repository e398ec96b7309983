// Package lending is the lending scenario: an RL trainer that owns a
// lendable pool and uses it in cycles, run once alone and once lending
// its idle phases to background responses through the admin API.
//
// # Overview
//
// While the trainer is busy it sends long completions straight to the
// pool's engines, so they report running sequences exactly while it
// works; meanwhile background responses are kept in flight through the
// gateway, closed loop. The pool's duty cycle is sampled from the
// engines' /metrics; with lending, each idle phase is lent and then
// reclaimed with a deadline, and each reclaim is checked by polling the
// engines until none runs a sequence (the Report's ReclaimChecks).
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target with a LendingTarget enter Run;
// the lending run's driver.Result and the Report (holding the run alone's
// Result too) leave it. The admin API is called over HTTP with the
// target's admin token.
//
// # Concurrency model
//
// Run blocks until both runs end. Inside a run the trainer, the duty
// sampler and each background job are goroutines that share the run's
// Figures under one mutex and the job book under its own; all are joined
// before the run's figures are read.
package lending
