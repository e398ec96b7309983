// Package guard is the content-safety check on the way in: before an
// engine is asked, a turn's text is sent to an HTTP service that allows
// or refuses it.
//
// # Overview
//
// A Guard is built from Config (the service's URL, the check's name, fail
// mode, timeout and scope). CheckInput posts a Request (check, tenant,
// direction, model, text) as JSON and reads a Verdict ({"allowed": bool,
// "reason": string}) from a 200. A refusal is a *Refusal, which the
// gateway answers 400 content_policy_violation naming the check; a check
// that fails (an error, a timeout, another status, an answer it cannot
// read) lets the turn through under fail mode open and is ErrUnavailable
// (a 503) under closed.
//
// # How data enters and leaves
//
// The prompt of a turn enters CheckInput (dispatch.Begin calls it once a
// turn, before admission, for every API: chat, completions, Responses and
// batch lines); only its text leaves, to the check, and the verdict comes
// back. turnpike_guard_checks_total{check,result} and
// turnpike_guard_check_seconds{check} count and time the checks.
//
// # Concurrency model
//
// A Guard is safe for concurrent use: each check is one HTTP request on
// the caller's goroutine, bounded by Timeout and the caller's context.
package guard
