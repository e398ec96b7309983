// Package mcpclient is how the Responses service reaches the MCP servers
// of a request's mcp tools: it connects to a remote server (streamable
// HTTP), lists its tools and calls them.
//
// # Overview
//
// A Client holds what every response shares: the bound on one request
// (Timeout) and the check a server's URL must pass before it is first
// connected to (Allow; responses allows the prefixes its operator
// configured). Open starts a response's Sessions: one connection per
// server label, made on first use and reused for the response's later
// lists and calls, closed by Close. A failure to reach or speak with a
// server is an error; so is a tool's own failure (a result with isError).
// CallError writes either as the JSON of an mcp_call's error, as OpenAI
// writes it. The tool loop (which tools are offered, approvals,
// max_tool_calls, the items and their events) is the responses package's.
//
// # How data enters and leaves
//
// A server enters as a *wire.MCPServer (its label, URL and headers, the
// headers set on every request to it), a call as a tool name and its
// arguments' JSON. Tools leave as wire.MCPListedTool values, a call's
// result as the text of its text content and the JSON of any other.
// Requests leave over HTTP; nothing is stored.
//
// # Concurrency model
//
// A Client's fields are set before the first Open and only read after; it
// may be shared. A Sessions is owned by the goroutine of its response and
// is not safe for concurrent use.
package mcpclient
