package openai

import (
	"encoding/json"
	"errors"
	"net/http"
)

// ErrNoTokenizer is returned by Request.Tokenize for a text prompt with no tokenizer.
var ErrNoTokenizer = errors.New("openai: text prompt needs a tokenizer")

// Error is an API error in OpenAI's shape. Status is the HTTP status it maps to.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

func (e *Error) Error() string {
	if e.Param != "" {
		return "openai: " + e.Param + ": " + e.Message
	}
	return "openai: " + e.Message
}

// BadRequest is a 400 invalid_request_error about param.
func BadRequest(param, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: msg}
}

// NewError builds an error with an explicit status and type.
func NewError(status int, typ, code, msg string) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: msg}
}

// WriteError writes err as {"error": {...}}. An *Error keeps its status; anything else
// is a 500 whose message is err's text.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Type: "internal_error", Message: err.Error()}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(struct {
		Error *Error `json:"error"`
	}{e})
}

func asTypeError(err error, target **json.UnmarshalTypeError) bool { return errors.As(err, target) }
