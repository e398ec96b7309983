// Package lora is the LoRA scenario: agent sessions that each ask for one
// of many LoRA adapters of the served model, on a fleet whose engines
// hold fewer adapters at once than there are, and what routing does to
// adapter loads.
//
// # Overview
//
// The sessions are the agentic workload's (workload.PlanAgentic), each
// given an adapter by Zipf popularity (workload.AssignAdapters). Run
// sends them, and its Report gives the adapter loads the engines made per
// 1,000 requests, the requests that waited on a load, and the TTFT:
// round-robin loads an adapter wherever a turn lands; routing with
// adapter affinity sends a turn where its adapter is loaded.
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target enter Run; the driver.Result and
// the Report leave it. Loads and waits are read from the engines'
// /metrics (the simulator's sim_lora_loads_total and
// sim_lora_load_waits_total) before and after the run.
//
// # Concurrency model
//
// Run blocks until every session ends; the driver runs each session in a
// goroutine of its own.
package lora
