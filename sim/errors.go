package sim

import "errors"

// Errors returned by the package, wrapped with details.
var (
	// ErrConfig: a Config field is invalid.
	ErrConfig = errors.New("sim: invalid config")
	// ErrTooLong: a request can never fit (longer than the model length or the KV cache).
	ErrTooLong = errors.New("sim: request too long")
	// ErrClosed: the server is closed or not started.
	ErrClosed = errors.New("sim: server closed")
	// ErrRestarted: the engine restarted (a fault) while the request was in flight.
	ErrRestarted = errors.New("sim: engine restarted")
	// ErrInjected: the request failed by fault injection.
	ErrInjected = errors.New("sim: injected failure")
	// ErrUnknownModel: the request names neither the model nor a LoRA adapter.
	ErrUnknownModel = errors.New("sim: unknown model")
	// ErrInternal: an unexpected internal failure.
	ErrInternal = errors.New("sim: internal error")
)

// More errors.
var (
	// ErrBadRequest: the request is malformed.
	ErrBadRequest = errors.New("sim: bad request")
	// ErrBusy: the operation is refused while requests run.
	ErrBusy = errors.New("sim: busy")
)
