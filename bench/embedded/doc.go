// Package embedded runs turnpike bench's workloads against gateways it
// starts itself, over simulated fleets: the stacks and fleets each
// workload needs (one gateway, several on one Redis behind a front, a
// fleet whose replicas are replaced, a lending stack), and the results
// written from their runs. It is what `turnpike bench` does once its
// flags are read; cmd/turnpike keeps the flags and subcommands.
//
// What belongs here: a workload's glue between the assembly (stack), the
// simulator (accelerators/sim) and the load generator (bench and its
// scenarios), for runs on an embedded fleet. A scenario's schedule and
// report stay in bench/scenario/..., which imports nothing of the
// gateway's.
//
// # How data enters and leaves
//
// A bench.Config and a Fleet (the simulated fleet cmd's flags describe)
// enter each run; results.json, the reports and each workload's own JSON
// are written to the output directory, and the text report to the
// writer given.
//
// # Concurrency model
//
// Each function runs its workload to the end and stops what it started
// before it returns; nothing runs after.
package embedded
