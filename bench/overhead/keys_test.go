package overhead

import (
	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
)

// EngineMetrics keys the tests fill scrapes with.
var (
	vllmPromptKey     = scrape.Key(enginemetrics.VLLMPromptTokens)
	vllmGenerationKey = scrape.Key(enginemetrics.VLLMGenerationTokens)
)
