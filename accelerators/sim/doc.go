// Package sim is a simulated LLM engine that behaves like vLLM (or SGLang)
// wherever a router can see it: the OpenAI HTTP API, continuous batching,
// a paged KV cache with prefix caching, Prometheus metrics, KV events and
// faults. It is turnpike's embedded demo fleet, its test fixture and its
// benchmark backend.
//
// # Overview
//
// An Engine (New, Config) models one replica of a model (an
// accelerators.Model profile) on one accelerator (an
// accelerators.Accelerator). Its KV cache holds accelerators.KVBlocks
// blocks of 16 tokens unless Config.NumBlocks says otherwise. Each engine
// step costs roofline time: accelerators.PrefillTime of the uncached
// prompt tokens scheduled in it plus accelerators.DecodeStepTime of its
// decoding batch and their contexts, slept for TimeScale × that long in
// wall time. Metrics report simulated seconds, unscaled.
//
// Text is deterministic. Tokenize (4 bytes of UTF-8 a token) and
// RenderChat (the chat template) are documented rules that the gateway
// replicates to predict cache hits; BlockHash chains full blocks the way
// KV events report them. Answers are words drawn from the prompt's hash,
// exactly 4 bytes a token, so a follow-up turn that carries the answer
// hits the blocks the answer filled. Tool-call answers are deterministic
// too, their arguments JSON that satisfies the function's parameter
// schema (see schemaGen for the keywords read); so is the answer to a
// response_format (json_object, or json_schema), streamed and cut at
// max_tokens like text. With Config.Reasoning the model thinks first: a
// short text streamed as vLLM's reasoning_content and counted in
// completion_tokens_details.reasoning_tokens, within max_tokens. Faults
// are injected by rate (Config) or per request with the x-sim-fault
// header (FaultHeader: error=CODE, latency=DUR, hang, drop-after=N).
// StartFleet runs several engines on their own listeners; Fleet.Kill
// crashes one (its connections cut, new ones refused) and Fleet.Restart
// brings a fresh engine up on the same address. A Topology (topology.go)
// shapes a fleet into pools: aggregated, pd (a prefill and a decode
// pool), hbm, cpu-tier, mixed (an H200 and a TPU v6e pool of one model),
// in this process or in `turnpike sim` processes apart (Topology.Apart,
// Spawn). Its Fleets starts the pools' engines (Start) and stops them
// (Close), its replicas numbered across the pools for Kill and Restart.
//
// With Config.MaxLoRAs the engine serves LoRA adapters of its model as
// vLLM does (lora.go): that many slots, adapters loaded in size /
// LoRALoadBandwidth of simulated time (one load at a time; requests for
// an adapter being loaded wait on that load), the least recently used
// adapter no request uses unloaded when a load needs a slot, vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter, /v1/models entries
// with a parent, vllm:lora_requests_info, and an adapter's KV blocks
// chained from its own seed, their KV events naming it (lora_id,
// lora_name). A request for an adapter not loaded is a 404 unless
// Config.RuntimeLoRALoading loads it. The load is slept on the
// request's path: it delays that request, not the engine's steps.
//
// With Flavor sglang, roles prefill and decode follow SGLang's protocol
// instead (pd_sglang.go, Bootstrap): both legs carry bootstrap_host,
// bootstrap_port and bootstrap_room; the decoder claims the room's KV at
// the prefiller's bootstrap endpoint (BootstrapPath, on its main port).
//
// Config.Role splits prefill from decode as vLLM's NIXL connector does
// (pd.go, KVTransferParams): a prefill engine answers a request carrying
// kv_transfer_params do_remote_decode with the params a decoder needs and
// holds its blocks under a lease (Config.KVLease); a decode engine given
// those params claims the lease over the prefiller's side channel
// (PullPath) and spends the transfer — the prompt's KV bytes at the link
// bandwidth — beside its batch instead of recomputing. A both engine does
// either, and mixes prefill chunks with decodes in its steps, so a long
// prefill lengthens every running stream's inter-token gap.
//
// # Concurrency model
//
// Each engine runs one loop goroutine that owns the scheduler, the KV
// cache and the event log; nothing in them is locked. HTTP handlers run on
// their own goroutines: they decode, render, tokenize and plan the output
// of a request, then hand the sequence to the loop through a mutex-guarded
// inbox. The loop reports progress through the sequence's atomics and a
// one-slot notify channel, so it never blocks on a slow client. Metrics are
// written by the loop and read by scrapes through the client library's
// own synchronisation; Stats is a mutex-guarded snapshot.
//
// # Request lifecycle and ownership
//
// A handler draws the request's fault, validates it (model, max_model_len,
// KV capacity) and builds its sequence; until submit the handler owns it.
// Submit queues it; the loop enqueues it at the next step boundary and
// admits it first come, first served (or, under the priority scheduling
// policy, by its request's priority, then arrival) once the token budget,
// MaxNumSeqs and free blocks allow, taking references on the cached blocks
// of its prefix (those are its cached_tokens). Prefill proceeds in chunks;
// each step that completes the sequence's context samples one token, which
// the handler streams. When the KV cache cannot grow, the newest running
// sequence (under the priority policy, the one of the lowest priority) is
// preempted and recomputed later, mostly from the cache. The loop ends the
// sequence exactly once, with finish: success, the client gone (the handler
// marked it cancelled), or the engine closed. Its blocks return to the
// cache, unreferenced, and leave only by LRU eviction — unless the
// sequence holds a lease for a remote decoder: then the loop keeps the
// references until the lease is claimed (a pull, answered by the
// handler from the lease table at once; the loop frees the blocks at its
// next iteration) or expires (swept each iteration, with a timer when
// idle).
package sim
