// Package rollout is the rolling-update scenario: the agentic sessions
// while every replica of the fleet is replaced, one at a time, by one of a
// new revision, and what that cost the sessions.
//
// # Overview
//
// Run drives the agentic sessions through a driver.Runner. Once a share
// of their turns has been answered (Options.StartAt), a second goroutine
// replaces the replicas through a Fleet, in its steps (one replica, or a
// prefiller and a decoder together): replicas of the new revision join
// and take traffic, then the old ones leave the gateway's fleet and
// drain, which hands their sessions over (and warms their new endpoints,
// when the gateway does, the sessions' turns kept on the old replicas
// meanwhile: the Fleet stops those once the gateway sends them nothing). The Report splits the turns into
// before, during and after the rollout (failures, TTFT, cached share),
// and reads from the gateway's /metrics the hand-offs, warm-ups, prefill
// legs that crossed revisions, the steady-state TTFT before the rollout
// and the TTFT of each handed-over session's next turn.
//
// # How data enters and leaves
//
// A workload.Config, a driver.Target and a Fleet enter Run; the run's
// driver.Result and the Report leave it. The scenario imports nothing of
// the gateway's: the Fleet is the caller's (bench/embedded replaces the
// embedded fleet's engines).
//
// # Concurrency model
//
// Run blocks until the sessions end. The steps run one after the other
// in one goroutine beside them, joined before Run returns.
package rollout
