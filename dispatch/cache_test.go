package dispatch

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// TestCachePrediction: a session's second turn is predicted cached on the
// endpoint holding its first, as much as the engine then reports cached,
// and the endpoint's account sums both turns.
func TestCachePrediction(t *testing.T) {
	f := newHandOffFixture(t, []string{"", ""}, HandOffConfig{})
	first := strings.Repeat("the build fails on the linker step; ", 40)
	var predicted, delivered []int
	for _, content := range []string{first, first + "and now the tests time out."} {
		m, _ := json.Marshal(content)
		tr, err := f.d.Begin(t.Context(), &Spec{
			Tenant: "acme", Model: testModel, Path: chatPath,
			Body:         fmt.Appendf(nil, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":4,"messages":[{"role":"user","content":%s}]}`, m),
			ClientHeader: http.Header{"X-Session-Id": {"s1"}},
			Prompt:       &prompt.Prompt{Model: testModel, Messages: []prompt.Message{{Role: "user", Content: content}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		p, ok := tr.CachePrediction()
		if !ok || p.Endpoint != tr.Endpoint().ID {
			t.Fatalf("prediction %+v, %v on %s", p, ok, tr.Endpoint().ID)
		}
		_, u := readTurn(t, tr, true)
		tr.End(nil)
		predicted = append(predicted, p.Predicted)
		delivered = append(delivered, u.PromptTokensDetails.CachedTokens)
	}
	if predicted[0] != 0 || delivered[0] != 0 {
		t.Errorf("first turn: predicted %d, delivered %d, want 0 and 0", predicted[0], delivered[0])
	}
	if predicted[1] == 0 || predicted[1] != delivered[1] {
		t.Errorf("second turn: predicted %d, delivered %d, want the same, above 0", predicted[1], delivered[1])
	}
	var turns, sumPredicted, sumDelivered int64
	for _, ep := range f.reg.Endpoints() {
		if a, ok := f.d.CacheAccuracy(ep); ok {
			turns += a.Turns
			sumPredicted += a.PredictedTokens
			sumDelivered += a.DeliveredTokens
			if len(a.Misses) != 0 {
				t.Errorf("%s: misses %v", ep.ID, a.Misses)
			}
		}
	}
	if turns != 2 || sumPredicted != int64(predicted[1]) || sumDelivered != int64(delivered[1]) {
		t.Errorf("accounts: %d turns, %d predicted, %d delivered; want 2, %d, %d", turns, sumPredicted, sumDelivered, predicted[1], delivered[1])
	}
}
