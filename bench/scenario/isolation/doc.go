// Package isolation is the isolation scenario: tenant A's interactive
// turns at a steady rate, alone and under tenant B's burst of agent
// loops, in one run that takes turns between the two.
//
// # Overview
//
// The schedule alternates stretches of A alone with stretches in which B
// keeps BurstMultiple × FleetSlots agent loops in flight, so that the
// host's drift falls on both conditions. Each stretch alone starts when
// the run is ready for it, not at a time fixed in advance: after a
// warm-up that lasts until A's first turn has ended, and after a pause in
// which the previous burst's last request and batch have ended.
// The Report compares A's p99 TTFT in the two, round by round and
// overall, lists sheds by band and reason, and gives the engines' own
// occupancy in each condition (FleetLoad). A batch (workload.BatchLoad)
// may be submitted as each burst starts.
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target enter Run; the run's
// driver.Result and the Report leave it. With Target.Tenant set, each
// tenant's share runs in a process of its own (RunTenant is what that
// process runs), its requests streamed back as driver.TenantLines and
// recorded as the run's, on the run's clock.
//
// # Concurrency model
//
// Run blocks until the last burst has ended, deciding on its own
// goroutine when each stretch starts. A's sender, each burst's loops,
// each batch and the two fleet samplers are goroutines joined before the
// figures are built.
package isolation
