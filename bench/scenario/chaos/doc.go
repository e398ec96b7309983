// Package chaos is the chaos scenario: the agentic sessions, alternately
// on chat completions and the Responses API, while replicas of the fleet
// are killed and restarted on a schedule, and what the gateway did about
// it.
//
// # Overview
//
// Plan yields the rounds of workload.ChaosConfig's schedule; Run drives
// the sessions through a driver.Runner while a second goroutine kills and
// restarts driver.Target.Replicas round by round, watching each restarted
// replica's /metrics until it takes traffic again. The Report sorts
// failures by whether the client had seen the stream start, reads the
// gateway's stream migrations and retries from its /metrics before and
// after (bench/scrape), and checks the run against its goals.
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target enter Run; the run's
// driver.Result and the Report leave it. Replica i is the engine of
// Target.EngineMetricsURLs[i].
//
// # Concurrency model
//
// Run blocks until the sessions end. The schedule runs in one goroutine
// beside them, and one more per restarted replica watches it; all are
// joined before Run returns, and a replica down when the run ends is
// restarted first.
package chaos
