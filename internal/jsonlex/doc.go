// Package jsonlex holds the lexing primitives shared by kvroute's hand-written
// JSON fast paths (the OpenAI request scanner in internal/openai and the
// tokenizer.json loader in tokenizer): whitespace, literals, strings with their
// escapes, UTF-16 surrogate pairs and UTF-8 validation, numbers, and skipping a
// whole value with syntax checks.
//
// It is deliberately partial and never decides semantics or errors. Every
// primitive accepts only input that encoding/json reads the same way and reports
// !ok on anything else — a syntax error, a lone surrogate escape or invalid UTF-8
// in a decoded string (encoding/json substitutes U+FFFD), nesting deeper than the
// caller's budget. A caller that gets !ok gives up and decodes the whole document
// with encoding/json, which then produces the result or the error. Mapping keys
// to fields, duplicate and case-folded keys, and value types stay with the callers.
package jsonlex
