package agent

import "errors"

// Sentinel errors of the package; callers match them with errors.Is.
var (
	// ErrConfig wraps every configuration error reported by Config.Validate.
	ErrConfig = errors.New("agent: invalid config")
	// ErrDecode wraps every error of Decoder.Decode: the payload is not a KV-event batch.
	ErrDecode = errors.New("agent: undecodable event batch")
	// ErrFrames is returned for a ZMQ message whose frame layout is not [topic, seq, payload].
	ErrFrames = errors.New("agent: bad frame layout")
	// ErrReplay wraps failures of a replay request (unreachable socket, timeout).
	ErrReplay = errors.New("agent: replay failed")
	// ErrEngine wraps failures to read the engine's HTTP endpoints.
	ErrEngine = errors.New("agent: engine endpoint")
	// ErrClosed is returned by Run when the agent was already run.
	ErrClosed = errors.New("agent: already running or closed")
)
