package openai

import (
	"strconv"
	"strings"
	"unsafe"

	"github.com/kvroute/kvroute/internal/jsonlex"
	"github.com/kvroute/kvroute/tokenizer"
)

// This file is the fast path of decode: a hand-written JSON scanner for the request
// body that fills a wire exactly as encoding/json would, about 20× faster on a
// 36 KB prompt. It is deliberately partial: on anything unusual — a syntax error, a
// type mismatch, a duplicate or case-folded field name, a lone surrogate escape,
// invalid UTF-8, deep nesting, a number strconv rejects — it gives up and decode runs
// encoding/json, which then produces the result or the error. So the fast path never
// decides an error, and every body it accepts decodes to the same wire (proven by
// TestScanMatchesEncodingJSON and FuzzScanMatchesEncodingJSON).
//
// The one intended difference: objects inside "tools" and inside each message's
// "tool_calls" become *tokenizer.Object, which keeps key order (chat templates print
// them with tojson, and the reference prints keys in document order). decode applies
// the same ordering after an encoding/json fallback (orderTools).

// scanner walks a JSON body with jsonlex's primitives. Strings are copied out of
// it (callers may reuse bodies).
type scanner struct {
	jsonlex.Lexer
	dep int
}

// maxScanDepth bounds recursion; deeper bodies go to encoding/json (limit 10000).
const maxScanDepth = 128

// wire field bits, to refuse duplicates (encoding/json's merge rules for repeated
// fields are left to encoding/json).
const (
	fModel = 1 << iota
	fStream
	fStreamOptions
	fMaxTokens
	fMaxCompletionTokens
	fCacheSalt
	fPromptCacheKey
	fMessages
	fTools
	fAddGenerationPrompt
	fContinueFinalMessage
	fChatTemplateKwargs
	fAddSpecialTokens
	fPrompt
)

var wireFields = [...]string{"model", "stream", "stream_options", "max_tokens", "max_completion_tokens",
	"cache_salt", "prompt_cache_key", "messages", "tools", "add_generation_prompt", "continue_final_message",
	"chat_template_kwargs", "add_special_tokens", "prompt"}

// foldsToAny reports whether encoding/json would match key (case-insensitively,
// Unicode simple folding) to one of names.
func foldsToAny(key string, names []string) bool {
	for _, n := range names {
		if strings.EqualFold(key, n) {
			return true
		}
	}
	return false
}

// scanWire decodes body into w. ok is false when the body needs encoding/json.
func scanWire(body []byte, w *wire) (ok bool) {
	s := scanner{Lexer: jsonlex.Lexer{Data: body}}
	s.WS()
	if !s.Consume('{') {
		return false
	}
	var seen int
	s.WS()
	if s.Consume('}') {
		return s.End()
	}
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		bit := 0
		for i, name := range wireFields {
			if key == name {
				bit = 1 << i
				break
			}
		}
		if bit == 0 {
			if foldsToAny(key, wireFields[:]) || !s.skip() {
				return false
			}
		} else {
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			if !s.field(bit, w) {
				return false
			}
		}
		if more, ok := s.next('}'); !more {
			return ok && s.End()
		}
	}
}

// field decodes the value of one known wire field.
func (s *scanner) field(bit int, w *wire) bool {
	null := s.Null()
	switch bit {
	case fModel, fCacheSalt, fPromptCacheKey:
		if null {
			return true
		}
		v, ok := s.str()
		if !ok {
			return false
		}
		switch bit {
		case fModel:
			w.Model = &v
		case fCacheSalt:
			w.CacheSalt = &v
		default:
			w.PromptCacheKey = &v
		}
		return true
	case fStream, fContinueFinalMessage, fAddGenerationPrompt, fAddSpecialTokens:
		if null {
			return true
		}
		v, ok := s.Bool()
		if !ok {
			return false
		}
		switch bit {
		case fStream:
			w.Stream = v
		case fContinueFinalMessage:
			w.ContinueFinalMessage = v
		case fAddGenerationPrompt:
			w.AddGenerationPrompt = &v
		default:
			w.AddSpecialTokens = &v
		}
		return true
	case fMaxTokens, fMaxCompletionTokens:
		if null {
			return true
		}
		v, ok := s.number()
		if !ok {
			return false
		}
		if bit == fMaxTokens {
			w.MaxTokens = &v
		} else {
			w.MaxCompletionTokens = &v
		}
		return true
	case fStreamOptions:
		if null {
			return true
		}
		w.StreamOptions = &streamOptions{}
		return s.streamOptions(w.StreamOptions)
	case fMessages:
		if null {
			return true
		}
		return s.messages(w)
	case fTools:
		if null {
			return true
		}
		if s.Peek() != '[' {
			return false
		}
		v, ok := s.value(true)
		if !ok {
			return false
		}
		w.Tools = v.([]any)
		return true
	case fChatTemplateKwargs:
		if null {
			return true
		}
		if s.Peek() != '{' {
			return false
		}
		v, ok := s.value(false)
		if !ok {
			return false
		}
		w.ChatTemplateKwargs = v.(map[string]any)
		return true
	case fPrompt:
		if null {
			w.Prompt = []byte("null")
			return true
		}
		start := s.Pos
		if !s.skip() {
			return false
		}
		w.Prompt = append([]byte(nil), s.Data[start:s.Pos]...)
		return true
	}
	return false
}

func (s *scanner) streamOptions(o *streamOptions) bool {
	if !s.Consume('{') {
		return false
	}
	s.WS()
	if s.Consume('}') {
		return true
	}
	seen := false
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		switch {
		case key == "include_usage":
			if seen {
				return false
			}
			seen = true
			if !s.Null() {
				if o.IncludeUsage, ok = s.Bool(); !ok {
					return false
				}
			}
		case strings.EqualFold(key, "include_usage") || !s.skip():
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// messages decodes the messages array: each element an object (map[string]any,
// with tool_calls ordered) or null.
func (s *scanner) messages(w *wire) bool {
	if !s.Consume('[') {
		return false
	}
	msgs := make([]map[string]any, 0, 4)
	s.WS()
	if s.Consume(']') {
		w.Messages = msgs
		return true
	}
	for {
		s.WS()
		var m map[string]any
		if !s.Null() {
			if s.Peek() != '{' {
				return false
			}
			s.dep++
			var ok bool
			if m, ok = s.object(false, true); !ok {
				return false
			}
			s.dep--
		}
		msgs = append(msgs, m)
		if more, ok := s.next(']'); !more {
			if ok {
				w.Messages = msgs
			}
			return ok
		}
	}
}

// object decodes an object at '{' into a map. ordered makes nested objects
// *tokenizer.Object; toolCalls orders the value of a "tool_calls" key (messages).
func (s *scanner) object(ordered, toolCalls bool) (map[string]any, bool) {
	s.Pos++ // '{'
	m := make(map[string]any, 4)
	s.WS()
	if s.Consume('}') {
		return m, true
	}
	for {
		key, ok := s.key()
		if !ok {
			return nil, false
		}
		v, ok := s.value(ordered || (toolCalls && key == "tool_calls"))
		if !ok {
			return nil, false
		}
		m[key] = v
		if more, ok := s.next('}'); !more {
			return m, ok
		}
	}
}

// orderedObject decodes an object at '{' keeping key order (last duplicate wins,
// at its first position, like tokenizer.DecodeJSON).
func (s *scanner) orderedObject() (*tokenizer.Object, bool) {
	s.Pos++ // '{'
	o := &tokenizer.Object{Values: make(map[string]any, 4)}
	s.WS()
	if s.Consume('}') {
		return o, true
	}
	for {
		key, ok := s.key()
		if !ok {
			return nil, false
		}
		v, ok := s.value(true)
		if !ok {
			return nil, false
		}
		if _, dup := o.Values[key]; !dup {
			o.Keys = append(o.Keys, key)
		}
		o.Values[key] = v
		if more, ok := s.next('}'); !more {
			return o, ok
		}
	}
}

// value decodes any JSON value the way encoding/json fills an interface{}:
// map[string]any (or *tokenizer.Object when ordered), []any, string, float64, bool, nil.
func (s *scanner) value(ordered bool) (any, bool) {
	switch c := s.Peek(); {
	case c == '"':
		return s.str()
	case c == '{' || c == '[':
		if s.dep++; s.dep > maxScanDepth {
			return nil, false
		}
		defer func() { s.dep-- }()
		if c == '{' {
			if ordered {
				return s.orderedObject()
			}
			return s.object(false, false)
		}
		s.Pos++
		arr := []any{}
		s.WS()
		if s.Consume(']') {
			return arr, true
		}
		for {
			s.WS()
			v, ok := s.value(ordered)
			if !ok {
				return nil, false
			}
			arr = append(arr, v)
			if more, ok := s.next(']'); !more {
				return arr, ok
			}
		}
	case c == 't' || c == 'f':
		return s.Bool()
	case c == 'n':
		return nil, s.Null()
	default:
		return s.number()
	}
}

// key reads an object member's key and its colon, with the whitespace around them.
func (s *scanner) key() (string, bool) {
	s.WS()
	k, ok := s.str()
	if !ok {
		return "", false
	}
	s.WS()
	if !s.Consume(':') {
		return "", false
	}
	s.WS()
	return k, true
}

// next passes what follows a member or an element: more after ',', !more after
// close (ok) or anything else (!ok).
func (s *scanner) next(close byte) (more, ok bool) {
	s.WS()
	if s.Consume(',') {
		return true, true
	}
	return false, s.Consume(close)
}

// skip validates and passes one value (syntax only, like encoding/json for a
// value it discards).
func (s *scanner) skip() bool { return s.Skip(maxScanDepth - s.dep) }

// number decodes a number as encoding/json does into float64 (strconv.ParseFloat;
// out-of-range numbers are left to encoding/json's error).
func (s *scanner) number() (float64, bool) {
	text, ok := s.Number()
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(text), len(text)), 64)
	return f, err == nil
}

// str decodes the string at s.Pos into a new string. Invalid UTF-8 and lone
// surrogate escapes are left to encoding/json (it replaces them with U+FFFD).
func (s *scanner) str() (string, bool) {
	if s.Peek() != '"' {
		return "", false
	}
	start := s.Pos + 1
	// A long string seen before: found by its raw bytes, before any per-byte work.
	if str, n, ok := interned.lookup(s.Data[start:]); ok {
		s.Pos = start + n + 1
		return str, true
	}
	raw, escaped, ok := s.RawString()
	if !ok {
		return "", false
	}
	var str string
	if !escaped {
		str = string(raw)
	} else {
		out, ok := jsonlex.Unescape(make([]byte, 0, len(raw)), raw)
		if !ok {
			return "", false
		}
		str = unsafe.String(unsafe.SliceData(out), len(out))
	}
	if len(raw) >= internMinBytes {
		interned.put(raw, str)
	}
	return str, true
}
