package sim

import (
	"fmt"
	"net/http"
)

// Faults are the failures a Server injects. The zero value injects nothing. Set them
// with Config.Faults, (*Server).SetFaults or POST /admin/faults (JSON, this shape).
type Faults struct {
	// DropEventsFraction drops this fraction (0..1) of event batches after numbering them,
	// so subscribers see seq gaps (the replay buffer still holds them, as with a PUB
	// that dropped for a slow subscriber).
	DropEventsFraction float64 `json:"drop_events_fraction"`
	// StopEvents publishes nothing while set (batches still go to the replay buffer).
	StopEvents bool `json:"stop_events"`
	// SlowFactor multiplies every step's duration; 0 or 1 = normal speed.
	SlowFactor float64 `json:"slow_factor"`
	// FailFraction fails this fraction (0..1) of completion requests with FailStatus.
	FailFraction float64 `json:"fail_fraction"`
	// FailStatus is 500 (default) or 503.
	FailStatus int `json:"fail_status"`
	// CutStreamFraction cuts this fraction (0..1) of streamed responses midway: the
	// connection closes after about half the tokens, without [DONE].
	CutStreamFraction float64 `json:"cut_stream_fraction"`
}

// FaultRequest is the body of POST /admin/faults: the new fault set and, with Restart,
// a one-shot engine restart (cache wiped, event seq back to 0, no cleared event,
// requests in flight failed).
type FaultRequest struct {
	Faults
	Restart bool `json:"restart"`
}

func (f *Faults) validate() error {
	frac := func(name string, v float64) error {
		if v < 0 || v > 1 || v != v {
			return fmt.Errorf("%w: fault %s %v: want 0..1", ErrConfig, name, v)
		}
		return nil
	}
	if err := frac("drop_events_fraction", f.DropEventsFraction); err != nil {
		return err
	}
	if err := frac("fail_fraction", f.FailFraction); err != nil {
		return err
	}
	if err := frac("cut_stream_fraction", f.CutStreamFraction); err != nil {
		return err
	}
	if f.SlowFactor < 0 || f.SlowFactor != f.SlowFactor {
		return fmt.Errorf("%w: fault slow_factor %v: want ≥ 0", ErrConfig, f.SlowFactor)
	}
	switch f.FailStatus {
	case 0, http.StatusInternalServerError, http.StatusServiceUnavailable:
	default:
		return fmt.Errorf("%w: fault fail_status %d: want 500 or 503", ErrConfig, f.FailStatus)
	}
	return nil
}

func (f *Faults) slow() float64 {
	if f.SlowFactor == 0 {
		return 1
	}
	return f.SlowFactor
}

func (f *Faults) failStatus() int {
	if f.FailStatus == 0 {
		return http.StatusInternalServerError
	}
	return f.FailStatus
}
