package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// endOfReplay is the seq of the replay end marker.
const endOfReplay = math.MaxUint64

// splitLive splits a live PUB message [topic, seq (8 bytes BE), payload].
func splitLive(frames [][]byte) (seq uint64, payload []byte, err error) {
	if len(frames) != 3 {
		return 0, nil, fmt.Errorf("%w: %d frames, want [topic, seq, payload]", ErrFrames, len(frames))
	}
	if len(frames[1]) != 8 {
		return 0, nil, fmt.Errorf("%w: seq frame of %d bytes, want 8", ErrFrames, len(frames[1]))
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// splitReplay splits a replay reply: ["", topic, seq, payload] (vLLM ≥ v0.26) or
// ["", seq, payload] (older vLLM, SGLang), with or without the empty delimiter. In every
// form the seq is the second-to-last frame and the payload the last. end reports the
// end marker (seq 0xffffffffffffffff).
func splitReplay(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	n := len(frames)
	if n < 2 || n > 4 {
		return 0, nil, false, fmt.Errorf("%w: replay reply of %d frames", ErrFrames, n)
	}
	if len(frames[n-2]) != 8 {
		return 0, nil, false, fmt.Errorf("%w: replay seq frame of %d bytes, want 8", ErrFrames, len(frames[n-2]))
	}
	seq = binary.BigEndian.Uint64(frames[n-2])
	return seq, frames[n-1], seq == endOfReplay, nil
}

// zmqLogger sends zmq4's internal log lines to slog at debug level.
func zmqLogger(l *slog.Logger) *log.Logger {
	return slog.NewLogLogger(l.Handler(), slog.LevelDebug)
}

// subscriber reads the engine's PUB stream into out until ctx is done. In dial mode it
// redials (with back-off) whenever the connection drops or cannot be made, so the engine
// may come up later and restart at will; in bind mode it keeps its listener and reads on
// (a bound zmq4 SUB reports io.EOF each time one peer disconnects).
type subscriber struct {
	endpoint string
	bind     bool
	topic    string
	log      *slog.Logger
	out      chan<- [][]byte
	bound    atomic.Pointer[string] // the bound address (bind mode)
	ready    chan struct{}          // closed once subscribed the first time
	conns    atomic.Int64           // successful dials / binds
}

func (s *subscriber) run(ctx context.Context) {
	if s.bind {
		s.runBound(ctx)
		return
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		sock := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(zmqLogger(s.log)))
		if err := sock.SetOption(zmq4.OptionSubscribe, s.topic); err != nil {
			s.log.Error("zmq subscribe", "err", err)
		}
		if err := sock.Dial(s.endpoint); err != nil {
			_ = sock.Close()
			s.log.Debug("zmq dial failed; retrying", "endpoint", s.endpoint, "err", err, "backoff", backoff)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		s.conns.Add(1)
		s.markReady()
		s.log.Info("zmq connected", "endpoint", s.endpoint)
		err := s.recvLoop(ctx, sock, false)
		_ = sock.Close()
		if ctx.Err() == nil {
			s.log.Warn("zmq connection lost; redialling", "endpoint", s.endpoint, "err", err)
		}
	}
}

func (s *subscriber) runBound(ctx context.Context) {
	for ctx.Err() == nil {
		sock := zmq4.NewSub(ctx, zmq4.WithLogger(zmqLogger(s.log)))
		if err := sock.SetOption(zmq4.OptionSubscribe, s.topic); err != nil {
			s.log.Error("zmq subscribe", "err", err)
		}
		if err := sock.Listen(s.endpoint); err != nil {
			_ = sock.Close()
			s.log.Error("zmq bind failed; retrying", "endpoint", s.endpoint, "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		if a := sock.Addr(); a != nil {
			addr := "tcp://" + a.String()
			s.bound.Store(&addr)
		}
		s.conns.Add(1)
		s.markReady()
		s.log.Info("zmq bound", "endpoint", s.endpoint)
		_ = s.recvLoop(ctx, sock, true)
		_ = sock.Close()
	}
}

// recvLoop delivers messages until ctx ends or, in dial mode, the connection drops.
func (s *subscriber) recvLoop(ctx context.Context, sock zmq4.Socket, bound bool) error {
	for {
		msg, err := sock.Recv()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if bound && errors.Is(err, io.EOF) {
				continue // one peer went away; the listener stays
			}
			if bound {
				s.log.Debug("zmq recv", "err", err)
				continue
			}
			return err
		}
		select {
		case s.out <- msg.Frames:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *subscriber) markReady() {
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// replayFrom asks the engine's replay ROUTER (through a DEALER) for every batch from
// start on and calls fn for each in order, until the end marker. It reports the first
// seq replayed (ok=false when none). Each reply must arrive within timeout.
func replayFrom(ctx context.Context, endpoint string, start uint64, timeout time.Duration, l *slog.Logger,
	fn func(seq uint64, payload []byte)) (first uint64, ok bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(0), zmq4.WithLogger(zmqLogger(l)),
		zmq4.WithDialerTimeout(timeout), zmq4.WithTimeout(timeout))
	defer sock.Close()
	if err := sock.Dial(endpoint); err != nil {
		return 0, false, fmt.Errorf("%w: dial %s: %v", ErrReplay, endpoint, err)
	}
	req := zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, start))
	if err := sock.SendMulti(req); err != nil {
		return 0, false, fmt.Errorf("%w: send: %v", ErrReplay, err)
	}
	type reply struct {
		msg zmq4.Msg
		err error
	}
	replies := make(chan reply, 64)
	go func() {
		for {
			m, err := sock.Recv()
			select {
			case replies <- reply{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return first, ok, fmt.Errorf("%w: %v", ErrReplay, ctx.Err())
		case <-timer.C:
			return first, ok, fmt.Errorf("%w: no reply within %v", ErrReplay, timeout)
		case r := <-replies:
			if r.err != nil {
				return first, ok, fmt.Errorf("%w: recv: %v", ErrReplay, r.err)
			}
			timer.Reset(timeout)
			seq, payload, end, err := splitReplay(r.msg.Frames)
			if err != nil {
				l.Warn("bad replay reply skipped", "err", err)
				continue
			}
			if end {
				return first, ok, nil
			}
			if !ok {
				first, ok = seq, true
			}
			fn(seq, payload)
		}
	}
}
