package workload

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAgentChatBody(t *testing.T) {
	const size = 168 << 10
	b := AgentChatBody("m", true, size, 1, 3)
	if len(b) < size || len(b) > size+16<<10 {
		t.Errorf("body of %d bytes, want about %d", len(b), size)
	}
	if !bytes.Equal(b, AgentChatBody("m", true, size, 1, 3)) {
		t.Error("the same arguments gave two bodies")
	}
	if other := AgentChatBody("m", true, size, 1, 4); bytes.Equal(b, other) || !bytes.Equal(b[:20<<10], other[:20<<10]) {
		t.Error("sessions must share the system prompt and differ in history")
	}
	var req agentRequest
	if err := json.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	if !req.Stream || len(req.Tools) != len(agentTools) || req.Messages[0].Role != "system" || len(req.Messages) < 20 {
		t.Fatalf("stream %v, %d tools, %d messages", req.Stream, len(req.Tools), len(req.Messages))
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "tool" || !strings.Contains(last.Content, "\n") || !strings.Contains(last.Content, "\t") || !strings.Contains(string(b), `\"`) {
		t.Errorf("tool output lacks what JSON escapes: %q", last.Content[:80])
	}
}
