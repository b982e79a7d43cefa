package router

import (
	"errors"
	"net/http"

	"github.com/kvroute/kvroute/internal/openai"
)

// Errors returned by the package, wrapped with details. The HTTP layer translates them to
// OpenAI-shaped errors with the status named beside each.
var (
	ErrConfig          = errors.New("router: invalid config")
	ErrNoInstance      = errors.New("router: no healthy instance")                             // 503
	ErrUnknownModel    = errors.New("router: model not served by any instance")                // 404
	ErrOverloaded      = errors.New("router: every instance is past the hard in-flight limit") // 429
	ErrUpstream        = errors.New("router: upstream failed")                                 // 502
	ErrUpstreamTimeout = errors.New("router: upstream timed out")                              // 504
	ErrTooLarge        = errors.New("router: request body too large")                          // 413
	ErrContentType     = errors.New("router: content type must be application/json")           // 415
	ErrTokenize        = errors.New("router: tokenization failed")                             // 400 or 502
	ErrClosed          = errors.New("router: closed")
)

// apiError translates err to the OpenAI error the client sees.
func apiError(err error) *openai.Error {
	var oe *openai.Error
	switch {
	case errors.As(err, &oe):
		return oe
	case errors.Is(err, ErrUnknownModel):
		return &openai.Error{Status: http.StatusNotFound, Type: "NotFoundError", Code: "model_not_found", Param: "model", Message: err.Error()}
	case errors.Is(err, ErrOverloaded):
		return openai.NewError(http.StatusTooManyRequests, "rate_limit_error", "overloaded", err.Error())
	case errors.Is(err, ErrNoInstance):
		return openai.NewError(http.StatusServiceUnavailable, "service_unavailable", "no_instance", err.Error())
	case errors.Is(err, ErrUpstreamTimeout):
		return openai.NewError(http.StatusGatewayTimeout, "upstream_timeout", "upstream_timeout", err.Error())
	case errors.Is(err, ErrUpstream):
		return openai.NewError(http.StatusBadGateway, "upstream_error", "upstream_error", err.Error())
	case errors.Is(err, ErrTooLarge):
		return openai.NewError(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", err.Error())
	case errors.Is(err, ErrContentType):
		return openai.NewError(http.StatusUnsupportedMediaType, "invalid_request_error", "unsupported_media_type", err.Error())
	case errors.Is(err, ErrTokenize):
		return openai.NewError(http.StatusBadRequest, "invalid_request_error", "tokenization_failed", err.Error())
	}
	return openai.NewError(http.StatusInternalServerError, "internal_error", "", err.Error())
}

func writeError(w http.ResponseWriter, err error) { openai.WriteError(w, apiError(err)) }
