// Package mcptest is an in-process MCP server for tests of the MCP client
// and of the Responses API's mcp tools: a real server of the MCP SDK over
// streamable HTTP on a loopback port, with two tools, add (integers a and
// b; answers their sum) and fail (always fails), that notes the X-Key
// header of every request it gets.
package mcptest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Calc is the server. URL is its endpoint.
type Calc struct {
	URL  string
	mu   sync.Mutex
	keys []string
}

type addArgs struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}

// NewCalc starts a Calc, closed when t ends.
func NewCalc(t testing.TB) *Calc {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "calc", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(_ context.Context, _ *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(in.A + in.B)}}}, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, addArgs) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("disk on fire")
		})
	c := &Calc{}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.keys = append(c.keys, r.Header.Get("X-Key"))
		c.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Keys are the X-Key headers of the requests so far, in order.
func (c *Calc) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.keys)
}
