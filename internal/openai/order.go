package openai

import (
	"encoding/json"
	"strings"

	"github.com/kvroute/kvroute/tokenizer"
)

// orderTools gives a body decoded by encoding/json the key order the fast scanner
// keeps: objects inside "tools" and inside each message's "tool_calls" become
// *tokenizer.Object, in document order. Numbers stay float64, as encoding/json
// decodes them. When the body names a field ambiguously (two keys folding to
// "tools" or "messages") the values stay as encoding/json decoded them.
func orderTools(body []byte, w *wire) {
	hasCalls := false
	for _, m := range w.Messages {
		if _, ok := m["tool_calls"]; ok {
			hasCalls = true
			break
		}
	}
	if w.Tools == nil && !hasCalls {
		return
	}
	v, err := tokenizer.DecodeJSON(body)
	if err != nil {
		return
	}
	root, ok := v.(*tokenizer.Object)
	if !ok {
		return
	}
	if w.Tools != nil {
		if t, ok := uniqueFold(root, "tools"); ok {
			if arr, ok := orderedValue(t).([]any); ok && len(arr) == len(w.Tools) {
				w.Tools = arr
			}
		}
	}
	if !hasCalls {
		return
	}
	raw, ok := uniqueFold(root, "messages")
	if !ok {
		return
	}
	msgs, ok := raw.([]any)
	if !ok || len(msgs) != len(w.Messages) {
		return
	}
	for i, m := range w.Messages {
		if _, ok := m["tool_calls"]; !ok {
			continue
		}
		if o, ok := msgs[i].(*tokenizer.Object); ok {
			if tc, ok := o.Values["tool_calls"]; ok {
				m["tool_calls"] = orderedValue(tc)
			}
		}
	}
}

// uniqueFold returns the value of the only key of o that encoding/json would match
// to name.
func uniqueFold(o *tokenizer.Object, name string) (any, bool) {
	var found string
	n := 0
	for _, k := range o.Keys {
		if strings.EqualFold(k, name) {
			found = k
			n++
		}
	}
	if n != 1 {
		return nil, false
	}
	return o.Values[found], true
}

// orderedValue converts tokenizer.DecodeJSON output to what the scanner produces:
// json.Number becomes float64.
func orderedValue(v any) any {
	switch x := v.(type) {
	case *tokenizer.Object:
		for _, k := range x.Keys {
			x.Values[k] = orderedValue(x.Values[k])
		}
		return x
	case []any:
		for i := range x {
			x[i] = orderedValue(x[i])
		}
		return x
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return v
		}
		return f
	}
	return v
}
