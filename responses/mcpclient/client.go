package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// Client is how one service reaches MCP servers. Its fields are set before
// the first Open and not changed after.
type Client struct {
	// Timeout bounds one request to a server (connect, list tools, one
	// call). Zero means no bound but the caller's context.
	Timeout time.Duration
	// Allow is asked before a server is first connected to; an error it
	// returns is the failure of the list or call that would have
	// connected, and no request leaves. nil allows every server.
	Allow func(url string) error
}

// Open starts a response's sessions: none is connected until it is used.
func (c *Client) Open() *Sessions { return &Sessions{c: c} }

// Sessions holds a response's connections to its MCP servers, one per
// server label, opened on first use and closed by Close when the response
// ends. It is owned by the response's goroutine.
type Sessions struct {
	c     *Client
	conns map[string]*mcp.ClientSession
	// calls counts the calls made, for max_tool_calls.
	calls int
}

// Close closes the connections.
func (ss *Sessions) Close() {
	for _, c := range ss.conns {
		c.Close()
	}
}

// Calls is how many tool calls were made through ss.
func (ss *Sessions) Calls() int { return ss.calls }

// headerTransport adds a server's headers to each request.
type headerTransport struct {
	headers map[string]string
	base    http.RoundTripper
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return h.base.RoundTrip(r)
}

// bound is ctx bounded by the client's Timeout.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.Timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.Timeout)
}

// session connects to srv, once per Sessions.
func (ss *Sessions) session(ctx context.Context, srv *wire.MCPServer) (*mcp.ClientSession, error) {
	if c := ss.conns[srv.Label]; c != nil {
		return c, nil
	}
	if ss.c.Allow != nil {
		if err := ss.c.Allow(srv.URL); err != nil {
			return nil, err
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "turnpike", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerTransport{srv.Headers, http.DefaultTransport}}}
	ctx, cancel := ss.c.bound(ctx)
	defer cancel()
	c, err := client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, fmt.Errorf("connecting to MCP server %q: %w", srv.Label, err)
	}
	if ss.conns == nil {
		ss.conns = make(map[string]*mcp.ClientSession)
	}
	ss.conns[srv.Label] = c
	return c, nil
}

// List lists srv's tools, connecting to it on first use.
func (ss *Sessions) List(ctx context.Context, srv *wire.MCPServer) ([]wire.MCPListedTool, error) {
	c, err := ss.session(ctx, srv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := ss.c.bound(ctx)
	defer cancel()
	res, err := c.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	tools := make([]wire.MCPListedTool, 0, len(res.Tools))
	for _, t := range res.Tools {
		schema, _ := json.Marshal(t.InputSchema)
		ann, _ := json.Marshal(t.Annotations)
		tools = append(tools, wire.MCPListedTool{Name: t.Name, Description: t.Description, InputSchema: schema, Annotations: ann})
	}
	return tools, nil
}

// Call calls srv's tool name with arguments (a JSON object, or blank for
// none) and returns its output: the text of its text content, the JSON
// of any other. A tool's own failure (a result with isError) is an error
// that CallError writes as mcp_tool_execution_error. Every call counts
// in Calls, made or not.
func (ss *Sessions) Call(ctx context.Context, srv *wire.MCPServer, name, arguments string) (string, error) {
	ss.calls++
	var args map[string]any
	if strings.TrimSpace(arguments) != "" {
		if err := json.Unmarshal([]byte(arguments), &args); err != nil {
			return "", fmt.Errorf("the arguments are not a JSON object: %v", err)
		}
	}
	c, err := ss.session(ctx, srv)
	if err != nil {
		return "", err
	}
	ctx, cancel := ss.c.bound(ctx)
	defer cancel()
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	if res.IsError {
		b, _ := json.Marshal(res.Content)
		return "", toolError{content: b}
	}
	var out strings.Builder
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out.WriteString(c.Text)
		default:
			b, _ := json.Marshal(c)
			out.Write(b)
		}
	}
	return out.String(), nil
}

// toolError is a tool's own failure (a result with isError), its content
// as the server sent it.
type toolError struct{ content json.RawMessage }

func (e toolError) Error() string { return string(e.content) }

// CallError is an mcp_call's error as OpenAI writes it, in JSON: the
// tool's failure (mcp_tool_execution_error with its content), or a
// failure to reach or speak with the server, or any other error
// (mcp_protocol_error).
func CallError(err error) string {
	var te toolError
	if !errors.As(err, &te) {
		return wire.MCPProtocolError(err.Error())
	}
	b, _ := json.Marshal(struct {
		Type    string          `json:"type"`
		Content json.RawMessage `json:"content"`
	}{"mcp_tool_execution_error", te.content})
	return string(b)
}
