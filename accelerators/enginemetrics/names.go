package enginemetrics

// vLLM's series.
const (
	VLLMNumRequestsRunning = "vllm:num_requests_running" // gauge: sequences in the running batch
	VLLMNumRequestsWaiting = "vllm:num_requests_waiting" // gauge: sequences queued in the engine
	VLLMKVCacheUsagePerc   = "vllm:kv_cache_usage_perc"  // gauge: KV cache in use, 1 is full
	VLLMCacheConfigInfo    = "vllm:cache_config_info"    // gauge, always 1: the KV cache and scheduler shape as labels

	VLLMPrefixCacheQueries = "vllm:prefix_cache_queries_total" // counter: prompt tokens looked up in the prefix cache
	VLLMPrefixCacheHits    = "vllm:prefix_cache_hits_total"    // counter: of those, tokens found
	VLLMPromptTokens       = "vllm:prompt_tokens_total"        // counter: prefill tokens processed
	VLLMGenerationTokens   = "vllm:generation_tokens_total"    // counter: tokens generated
	VLLMRequestSuccess     = "vllm:request_success_total"      // counter: requests finished

	VLLMTimeToFirstToken  = "vllm:time_to_first_token_seconds" // histogram
	VLLMInterTokenLatency = "vllm:inter_token_latency_seconds" // histogram
	VLLME2ERequestLatency = "vllm:e2e_request_latency_seconds" // histogram

	// The spellings before v0.10 of VLLMKVCacheUsagePerc,
	// VLLMPrefixCacheQueries and VLLMPrefixCacheHits.
	VLLMGPUCacheUsagePerc     = "vllm:gpu_cache_usage_perc"
	VLLMGPUPrefixCacheQueries = "vllm:gpu_prefix_cache_queries_total"
	VLLMGPUPrefixCacheHits    = "vllm:gpu_prefix_cache_hits_total"

	// Prefill/decode disaggregation over NIXL, on the engine that pulls
	// the KV, and hits found through the KV connector.
	VLLMNIXLXferTime            = "vllm:nixl_xfer_time_seconds"           // histogram
	VLLMNIXLBytesTransferred    = "vllm:nixl_bytes_transferred"           // histogram
	VLLMExternalPrefixCacheHits = "vllm:external_prefix_cache_hits_total" // counter, in tokens

	// VLLMLoRARequestsInfo is a gauge whose value is the time (Unix
	// seconds) the engine last set it, its labels the LoRA adapters of
	// the running and the waiting requests (comma-separated) and the
	// adapter slots (LabelRunningLoRAAdapters, LabelWaitingLoRAAdapters,
	// LabelMaxLoRA). A new label set is a new series and the old ones
	// stay: the one with the latest value is current. Exported only by an
	// engine serving LoRA adapters.
	VLLMLoRARequestsInfo = "vllm:lora_requests_info"
)

// The simulator's own series, which no engine exports: what a benchmark
// reads back about adapter loads.
const (
	SimLoRALoads     = "sim_lora_loads_total"      // counter: adapters loaded into a slot
	SimLoRALoadWaits = "sim_lora_load_waits_total" // counter: requests that waited on an adapter's load
)

// SGLang's series.
const (
	SGLangNumRunningReqs  = "sglang:num_running_reqs"  // gauge: sequences in the running batch
	SGLangNumQueueReqs    = "sglang:num_queue_reqs"    // gauge: sequences queued in the engine
	SGLangTokenUsage      = "sglang:token_usage"       // gauge: KV cache in use, 1 is full
	SGLangCacheConfigInfo = "sglang:cache_config_info" // gauge, always 1: the KV cache and scheduler shape as labels
	SGLangCacheHitRate    = "sglang:cache_hit_rate"    // gauge: cached over prompt tokens

	SGLangPromptTokens     = "sglang:prompt_tokens_total"     // counter
	SGLangGenerationTokens = "sglang:generation_tokens_total" // counter
	SGLangCachedTokens     = "sglang:cached_tokens_total"     // counter: prompt tokens found in the radix cache

	SGLangTimeToFirstToken  = "sglang:time_to_first_token_seconds" // histogram
	SGLangInterTokenLatency = "sglang:inter_token_latency_seconds" // histogram
	SGLangE2ERequestLatency = "sglang:e2e_request_latency_seconds" // histogram
)

// Labels of the cache config info series (VLLMCacheConfigInfo,
// SGLangCacheConfigInfo), vLLM's and SGLang's names for the same
// quantities, and the label the other series carry.
const (
	LabelBlockSize           = "block_size"             // vLLM: tokens per KV block
	LabelNumGPUBlocks        = "num_gpu_blocks"         // vLLM: KV blocks in HBM
	LabelMaxNumSeqs          = "max_num_seqs"           // vLLM: sequences in a batch at most
	LabelMaxNumBatchedTokens = "max_num_batched_tokens" // vLLM: tokens in a step at most

	LabelPageSize           = "page_size"            // SGLang: LabelBlockSize
	LabelMaxTotalNumTokens  = "max_total_num_tokens" // SGLang: the KV cache in tokens
	LabelMaxRunningRequests = "max_running_requests" // SGLang: LabelMaxNumSeqs
	LabelChunkedPrefillSize = "chunked_prefill_size" // SGLang: LabelMaxNumBatchedTokens, -1 for none

	LabelModelName = "model_name" // the served model, on every other series

	LabelRunningLoRAAdapters = "running_lora_adapters" // VLLMLoRARequestsInfo: adapters of running requests
	LabelWaitingLoRAAdapters = "waiting_lora_adapters" // VLLMLoRARequestsInfo: adapters of waiting requests
	LabelMaxLoRA             = "max_lora"              // VLLMLoRARequestsInfo: adapter slots
)
