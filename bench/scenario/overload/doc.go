// Package overload is the overload scenario: more than the fleet can
// serve, in all three bands at once, and what the gateway does about it.
//
// # Overview
//
// Arrivals are open loop and Poisson per band (workload.OverloadConfig's
// rates), each prompt of blocks no other prompt has, so no routing policy
// can make the load fit. Run sends the interactive arrivals alone first
// (the baseline), then every band's, and its Report gives each band's
// offered, completed and shed requests (with Retry-After and the
// gateway's reasons) and the interactive TTFT against the baseline's.
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target enter Run; the second run's
// driver.Result and the Report leave it.
//
// # Concurrency model
//
// Run blocks until both runs end; each arrival is its own goroutine,
// joined before its run's figures are built.
package overload
