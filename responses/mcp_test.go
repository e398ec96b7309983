package responses

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestMCPApprovalPolicy: require_approval as a setting or a filter, and
// the tools each asks approval for.
func TestMCPApprovalPolicy(t *testing.T) {
	for _, tt := range []struct {
		name, approval string
		needs          map[string]bool
	}{
		{"default", ``, map[string]bool{"add": true, "rm": true}},
		{"never", `,"require_approval":"never"`, map[string]bool{"add": false, "rm": false}},
		{"always", `,"require_approval":"always"`, map[string]bool{"add": true}},
		{"never filter", `,"require_approval":{"never":{"tool_names":["add"]}}`, map[string]bool{"add": false, "rm": true}},
		{"always filter", `,"require_approval":{"always":{"tool_names":["rm"]},"never":{"tool_names":["add","ls"]}}`, map[string]bool{"add": false, "ls": false, "rm": true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := mustDecode(t, `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"fs","server_url":"https://mcp.example/mcp","headers":{"X-Key":"secret"}`+tt.approval+`}]}`)
			if len(req.MCP) != 1 || req.MCP[0].Headers["X-Key"] != "secret" {
				t.Fatalf("servers %+v", req.MCP)
			}
			for tool, want := range tt.needs {
				if got := req.MCP[0].NeedsApproval(tool); got != want {
					t.Errorf("%s needs approval: %v, want %v", tool, got, want)
				}
			}
			if strings.Contains(string(req.ToolsRaw[0]), "secret") {
				t.Errorf("the echoed tool carries its headers: %s", req.ToolsRaw[0])
			}
		})
	}
}

// TestMCPAllowedURLsDefault: with no MCPAllowedURLs the gateway calls no
// MCP server, and the error names the setting (issue 32, item 6).
func TestMCPAllowedURLsDefault(t *testing.T) {
	s := New(openStore(t, t.TempDir()).StateStore, &fakeEngine{}, Config{CollectInterval: -1})
	url, hits := countingServer(t)
	ms := s.mcp.Open()
	defer ms.Close()
	it := s.mcpList(t.Context(), ms, &wire.MCPServer{Label: "x", URL: url})
	if it.Type != wire.ItemMCPListTools || !strings.Contains(it.Error, "responses.mcpAllowedURLs") || hits.Load() != 0 {
		t.Fatalf("list with no server allowed: %+v", it)
	}
}

// TestMCPAllowedURLsBoundary: a prefix matches at a boundary only.
func TestMCPAllowedURLsBoundary(t *testing.T) {
	s := New(openStore(t, t.TempDir()).StateStore, &fakeEngine{}, Config{CollectInterval: -1,
		MCPAllowedURLs: []string{"https://tools.internal", "http://127.0.0.1:"}})
	for url, want := range map[string]bool{
		"https://tools.internal":                  true,
		"https://tools.internal/mcp":              true,
		"https://tools.internal?x=1":              true,
		"https://tools.internal.example.com/":     false,
		"https://tools.internal:8443/mcp":         false,
		"https://tools.internalx/mcp":             false,
		"http://127.0.0.1:8080/mcp":               true,
		"http://127.0.0.10:8080/mcp":              false,
		"http://169.254.169.254/latest/meta-data": false,
	} {
		if got := s.mcpAllowed(url) == nil; got != want {
			t.Errorf("mcpAllowed(%q) allowed = %v, want %v", url, got, want)
		}
	}
}

// TestMCPAllowedURLs: with MCPAllowedURLs set, a server outside them
// lists nothing: its list item carries the error and no request leaves.
func TestMCPAllowedURLs(t *testing.T) {
	s := New(openStore(t, t.TempDir()).StateStore, &fakeEngine{}, Config{CollectInterval: -1, MCPAllowedURLs: []string{"https://tools.internal/"}})
	if err := s.mcpAllowed("https://tools.internal/mcp"); err != nil {
		t.Fatalf("allowed server refused: %v", err)
	}
	url, hits := countingServer(t)
	ms := s.mcp.Open()
	defer ms.Close()
	it := s.mcpList(t.Context(), ms, &wire.MCPServer{Label: "x", URL: url})
	if it.Type != wire.ItemMCPListTools || !strings.Contains(it.Error, "mcpAllowedURLs") || it.Output != "[]" || hits.Load() != 0 {
		t.Fatalf("list of a server not allowed: %+v", it)
	}
}

// countingServer is the URL of a server on loopback that answers nothing
// but counts the requests that reach it.
func countingServer(t *testing.T) (string, *atomic.Int32) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", &hits
}
