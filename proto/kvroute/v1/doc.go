// Package kvroutev1 holds the generated Go code for kvroute's versioned wire protocol:
// the EventBatch, snapshot and heartbeat messages the agents publish on NATS, and the
// gRPC Index service. The .proto files beside it are the source of truth; regenerate
// with `make proto` and never edit the *.pb.go files by hand.
package kvroutev1

// NATS subject prefixes of protocol v1. The instance or router id is appended after the dot.
const (
	SubjectEvents    = "kvroute.v1.events."
	SubjectHeartbeat = "kvroute.v1.heartbeat."
	SubjectSnapshot  = "kvroute.v1.snapshot."
	SubjectInFlight  = "kvroute.v1.inflight."
)

// ValidateID reports whether id can be used as an instance or router id: it becomes one
// NATS subject token, so it must be non-empty, at most 128 bytes, and made of ASCII
// letters, digits, '-' and '_'.
func ValidateID(id string) error {
	if id == "" {
		return errEmptyID
	}
	if len(id) > 128 {
		return errLongID
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return errBadID
		}
	}
	return nil
}

// SanitizeID turns any string (such as an engine URL's host:port) into a valid id by
// replacing every disallowed byte with '-' and trimming it to 128 bytes.
func SanitizeID(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '-'
		}
	}
	if len(b) > 128 {
		b = b[:128]
	}
	if len(b) == 0 {
		return "instance"
	}
	return string(b)
}
