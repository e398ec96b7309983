// Package wire is the JSON of the Responses and Conversations API: the
// response, item and conversation objects as clients see them, and the
// strict decoders of every request body the API takes.
//
// # Overview
//
// DecodeCreateRequest reads a POST /v1/responses body strictly: an
// unknown parameter, a wrong type or a value out of range is an
// *apierror.Error of class ErrInvalid that names the parameter; nothing is
// silently dropped. Every field of OpenAI's request is accepted; those an
// engine has no use for are checked and left out (options.go), some
// echoed on the response. Tools (tools.go): function tools, namespace
// tools flattened as <namespace>__<name>, custom tools, mcp tools (mcp.go,
// whose servers responses runs) and hosted tools, which only OpenAI runs
// and which the request lists apart. DecodeCompactRequest and
// DecodeInputTokensRequest read the bodies of the compact and input_tokens
// endpoints as create requests of fewer fields (stateless.go);
// DecodeConversationBody and DecodeConversationItems those of the
// conversation endpoints. Item's and ContentPart's MarshalJSON write
// exactly the fields OpenAI writes for each type.
//
// # How data enters and leaves
//
// Bodies enter as bytes (or, from a WebSocket message, as members already
// split) and leave as a *CreateRequest, items or metadata; responses
// builds the Response, Item and ItemList values it answers with, and
// their encoders write them. The package keeps no state and does no I/O.
//
// # Concurrency model
//
// None of its own: every function works on its arguments. A CreateRequest
// decoded by DecodeCreateRequest aliases its body (the raw JSON it
// echoes), so the body must not change after; DecodeCreateRequestCopy is
// for a body the caller reuses.
package wire
