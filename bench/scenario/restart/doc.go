// Package restart is the gateway-restart scenario: agentic sessions,
// alternately on chat completions and the Responses API (chained by
// previous_response_id), through the bench's own front while each of two
// or more gateways on one state store is restarted in turn, as a rolling
// restart of a Deployment does; and what the clients saw.
//
// # Overview
//
// Front is the load balancer a Kubernetes Service would be: round-robin
// over the gateways whose /readyz answers 200, sending a request that
// meets a refused connection or a closed idle one to the next gateway. Run
// drives the sessions through a driver.Runner while a second goroutine
// restarts the gateways (Gateways.Restart: SIGTERM's graceful shutdown,
// then a new gateway on the same address) one at a time, each
// Options.Rounds times. The Report counts the failed requests, reads every
// acknowledged response back through the front (lost ones), checks each
// chained turn's previous response, and splits TTFT into before, during
// and after the restarts.
//
// # How data enters and leaves
//
// A workload.Config, a driver.Target (the front's URL), the Gateways and
// the Front enter Run; the run's driver.Result and the Report leave it.
//
// # Concurrency model
//
// Run blocks until the sessions end. The restarts run one after another in
// one goroutine beside them, joined before Run returns. The Front serves
// each request on its server's goroutine and reads readiness from one
// goroutine of its own until Close.
package restart
