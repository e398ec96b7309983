// Package accelerators describes the hardware turnpike schedules onto: a
// catalog of accelerator profiles and open-model profiles, and the roofline
// arithmetic that turns them into KV capacity and step times. Its
// subpackage sim is a simulated engine built on that arithmetic.
//
// # Overview
//
// LookupAccelerator and LookupModel return profiles by name; KVBlocks
// sizes a replica's paged KV cache (HBM × utilisation − weights, in
// blocks); PrefillTime and DecodeStepTime are roofline step times
// (prefill compute-bound, decode bandwidth-bound, each with a named
// efficiency factor). pools reads a pool's profiles for context length and
// capacity; sim builds its engine clock on the step times.
//
// # Concurrency model
//
// The catalog is filled at package initialisation and never written
// again; every function is pure. All of it is safe for concurrent use.
package accelerators
