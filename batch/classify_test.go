package batch

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestClassifyAnswersAsChat: a batch line ends with the error chat would
// answer for the same failure, from dispatch's one mapping (issue 32,
// item 7: a shed was rate_limit_exceeded in a batch line and
// server_overloaded on chat; an engine 4xx without a code engine_error and
// the status's name), and is retried or not by its kind.
func TestClassifyAnswersAsChat(t *testing.T) {
	s := &Service{opts: Options{Config: Config{RetryBackoff: time.Millisecond, MaxBackoff: time.Millisecond}}}
	for _, tc := range []struct {
		name  string
		err   error
		retry bool
		kind  string
	}{
		{"shed by overload", &turns.ShedError{Status: http.StatusServiceUnavailable, Reason: turns.ReasonSaturated}, true, kindEngine},
		{"shed by quota", &turns.ShedError{Status: http.StatusTooManyRequests, Reason: turns.ReasonQuotaRPM}, true, kindEngine},
		{"engine 4xx without a code", &dispatch.EngineError{Status: http.StatusNotFound, Message: "no such adapter"}, false, kindRefused},
		{"engine 4xx with its code", &dispatch.EngineError{Status: 422, Code: "invalid_tool", Message: "bad tool"}, false, kindRefused},
		{"engine rate limit", &dispatch.EngineError{Status: http.StatusTooManyRequests, Message: "slow down"}, true, kindEngine},
		{"engine 5xx", &dispatch.EngineError{Status: http.StatusInternalServerError, Message: "boom"}, true, kindEngine},
		{"model not found", dispatch.ModelNotFound("m-x"), false, kindInvalid},
		{"request field", &prompt.FieldError{Param: "messages", Code: "empty_array", Message: "empty"}, false, kindInvalid},
		{"no endpoint", fmt.Errorf("x: %w", dispatch.ErrNoEndpoint), true, kindEngine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, retry, final, kind := s.classify(tc.err, 1)
			want, _ := dispatch.APIError(tc.err)
			if final.Status != want.Status || final.Code != want.Code || final.Type != want.Type || final.Param != want.Param || final.Message != want.Message {
				t.Errorf("batch answers %d %s %q %q %q, chat %d %s %q %q %q", final.Status, final.Type, final.Code, final.Param, final.Message,
					want.Status, want.Type, want.Code, want.Param, want.Message)
			}
			if retry != tc.retry || kind != tc.kind {
				t.Errorf("retry %v kind %s, want %v %s", retry, kind, tc.retry, tc.kind)
			}
		})
	}
}
