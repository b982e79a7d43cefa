package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Object is a JSON object that remembers its key order. Chat templates print tools
// and tool-call arguments with tojson, and the reference (Python dicts, JavaScript
// objects) prints keys in document order, so callers that want exact prompts for
// tools decode request bodies with DecodeJSON rather than into map[string]any.
type Object struct {
	Keys   []string
	Values map[string]any
}

// Map returns the values as a plain map (order lost).
func (o *Object) Map() map[string]any { return o.Values }

// DecodeJSON decodes one JSON value: objects become *Object (ordered), arrays
// []any, numbers json.Number, strings string (invalid UTF-8 replaced by U+FFFD).
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("tokenizer: trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("tokenizer: json: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &Object{Values: make(map[string]any)}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("tokenizer: json: %w", err)
				}
				k := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.Values[k]; !dup {
					o.Keys = append(o.Keys, k)
				}
				o.Values[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("tokenizer: json: %w", err)
			}
			return o, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("tokenizer: json: %w", err)
			}
			return arr, nil
		}
		return nil, fmt.Errorf("tokenizer: json: unexpected %v", t)
	default:
		return tok, nil
	}
}

// MarshalJSON writes the object with its keys in order, so a request decoded with
// DecodeJSON (or by internal/openai) is forwarded to an engine unchanged in order.
func (o *Object) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.Keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kj)
		b.WriteByte(':')
		vj, err := json.Marshal(o.Values[k])
		if err != nil {
			return nil, err
		}
		b.Write(vj)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
