// Package jsonscan reads JSON in one pass, checking it exactly as
// encoding/json does, without building values: the scanner under the
// chat body parser of prompt and the readers of engine chunks and usage
// in responses and dispatch.
//
// # Overview
//
// Members, Elements and String split an object into its members, an
// array into its elements, and decode a string, each checking the whole
// document. Decoder is the cursor under them, for a reader of a grammar
// of its own (prompt's request parser) to embed and walk a document with:
// enter an object or array, read a key, a string, a number, a literal,
// skip a value. Strings are scanned eight bytes at a step, and long ones
// with escapes 64 bytes at a step (SWAR: the stops of a word found with
// integer arithmetic); a string with nothing to decode aliases the
// document, and the others share one buffer a document.
//
// A document that is not valid JSON is a *SyntaxError, whose Reason is
// encoding/json's wording; what a caller tells its client is its own.
//
// # Concurrency model
//
// A Decoder belongs to one goroutine; the functions keep no state. What
// they return may alias the document, which must not change while it is
// in use.
package jsonscan
