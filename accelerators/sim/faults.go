package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FaultHeader is the request header that forces a fault on one request,
// overriding the engine's configured fault rates for it. Its value is a
// comma-separated list of:
//
//	error=CODE      answer CODE (400–599) with an OpenAI-shaped error body;
//	                "error" alone uses the first of Config.ErrorStatuses
//	latency=DUR     wait DUR (a Go duration, wall clock, not scaled) before
//	                the request reaches the engine
//	hang            never answer; return only when the client goes away
//	drop-after=N    cut the connection abruptly after N streamed chunks
//	                (the role chunk counts), without [DONE]; a non-streamed
//	                request is cut before its body. "drop" alone uses
//	                Config.DropAfter
//
// For example "latency=250ms,drop-after=5". A malformed value is a 400.
const FaultHeader = "x-sim-fault"

// fault is what happens to one request besides normal service.
type fault struct {
	status    int // error status, 0 for none
	latency   time.Duration
	hang      bool
	dropAfter int // chunks before the cut, -1 for none
}

func parseFault(v string, cfg *Config) (fault, error) {
	f := fault{dropAfter: -1}
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, hasVal := strings.Cut(item, "=")
		var err error
		switch key {
		case "error":
			f.status = cfg.ErrorStatuses[0]
			if hasVal {
				f.status, err = strconv.Atoi(val)
				if err == nil && (f.status < 400 || f.status > 599) {
					err = fmt.Errorf("status %d is not a 4xx or 5xx", f.status)
				}
			}
		case "latency":
			f.latency, err = time.ParseDuration(val)
			if err == nil && f.latency < 0 {
				err = fmt.Errorf("negative latency")
			}
		case "hang":
			f.hang = true
		case "drop", "drop-after":
			f.dropAfter = cfg.DropAfter
			if hasVal {
				f.dropAfter, err = strconv.Atoi(val)
				if err == nil && f.dropAfter < 0 {
					err = fmt.Errorf("negative chunk count")
				}
			}
		default:
			err = fmt.Errorf("unknown fault %q", key)
		}
		if err != nil {
			return fault{}, fmt.Errorf("invalid %s %q: %w", FaultHeader, item, err)
		}
	}
	return f, nil
}

// drawFault decides a request's fault: from its header when present,
// otherwise from the configured rates with the engine's seeded source.
func (e *Engine) drawFault(header string) (fault, error) {
	if header != "" {
		return parseFault(header, &e.cfg)
	}
	f := fault{dropAfter: -1}
	cfg := &e.cfg
	if cfg.ErrorRate == 0 && cfg.LatencyRate == 0 && cfg.HangRate == 0 && cfg.DropRate == 0 {
		return f, nil
	}
	e.faults.Lock()
	defer e.faults.Unlock()
	r := e.faults.rand
	if r.Float64() < cfg.ErrorRate {
		f.status = cfg.ErrorStatuses[r.IntN(len(cfg.ErrorStatuses))]
	}
	if r.Float64() < cfg.LatencyRate {
		f.latency = cfg.Latency
	}
	if r.Float64() < cfg.HangRate {
		f.hang = true
	}
	if r.Float64() < cfg.DropRate {
		f.dropAfter = cfg.DropAfter
	}
	return f, nil
}
