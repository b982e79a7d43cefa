package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// replayEntry is one published batch kept for replay.
type replayEntry struct {
	seq     uint64
	payload []byte
}

// publisher is the engine's KV-event transport, like vLLM's ZmqEventPublisher: a PUB
// socket sending [topic, seq (8 bytes big-endian, from 0), payload], and a ROUTER socket
// answering replay requests from DEALER clients (["", start seq] →
// ["", topic, seq, payload]… then the end marker ["", "", 0xffffffffffffffff, ""]) out
// of a ring of the last KVEventsBufferSteps batches.
type publisher struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	topic []byte

	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	replay zmq4.Socket
	wg     sync.WaitGroup

	eventsEP, replayEP string

	mu   sync.Mutex
	seq  uint64 // next sequence number
	ring []replayEntry
	head int // index of the oldest entry when the ring is full
}

func newPublisher(cfg Config, m *metrics, log *slog.Logger) *publisher {
	return &publisher{cfg: cfg, m: m, log: log, topic: []byte(cfg.KVEventsTopic)}
}

// start binds or dials the sockets.
func (p *publisher) start(ctx context.Context) error {
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ep := p.cfg.KVEventsEndpoint
	bind := bindEndpoint(ep)
	opts := []zmq4.Option{zmq4.WithDialerMaxRetries(-1)}
	if !bind {
		// Like libzmq, a connecting PUB redials when the peer goes away (a restarted agent).
		opts = append(opts, zmq4.WithAutomaticReconnect(true))
	}
	p.pub = zmq4.NewPub(p.ctx, opts...)
	if p.cfg.KVEventsHWM > 0 {
		if err := p.pub.SetOption(zmq4.OptionHWM, p.cfg.KVEventsHWM); err != nil {
			return fmt.Errorf("%w: PUB high-water mark: %v", ErrInternal, err)
		}
	}
	if bind {
		if err := p.pub.Listen(ep); err != nil {
			p.pub.Close()
			return fmt.Errorf("sim: bind KV events %s: %w", ep, err)
		}
		p.eventsEP = dialable(ep, p.pub.Addr())
	} else {
		p.eventsEP = ep
		p.wg.Add(1)
		go func() { // vLLM connects; the peer may bind later, so keep retrying
			defer p.wg.Done()
			if err := p.pub.Dial(ep); err != nil && p.ctx.Err() == nil {
				p.log.Warn("KV events: dial failed", "endpoint", ep, "err", err)
			}
		}()
	}
	if rep := p.cfg.KVEventsReplayEndpoint; rep != "" {
		p.replay = zmq4.NewRouter(p.ctx)
		if err := p.replay.Listen(rep); err != nil {
			p.cancel()
			p.pub.Close()
			return fmt.Errorf("sim: bind KV events replay %s: %w", rep, err)
		}
		p.replayEP = dialable(rep, p.replay.Addr())
		p.wg.Add(1)
		go p.serveReplay()
	}
	return nil
}

// dialable turns a bound endpoint into one a local peer can dial: the real port, and
// 127.0.0.1 for a wildcard host.
func dialable(ep string, addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || !strings.HasPrefix(ep, "tcp://") {
		return ep
	}
	host := ta.IP.String()
	if ta.IP == nil || ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "tcp://" + net.JoinHostPort(host, fmt.Sprint(ta.Port))
}

func (p *publisher) close() error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	var errs []error
	keep := func(err error) {
		// zmq4 reports peers that already hung up; that is not a failure to close.
		if err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if p.pub != nil {
		keep(p.pub.Close())
	}
	if p.replay != nil {
		keep(p.replay.Close())
	}
	p.wg.Wait()
	return errors.Join(errs...)
}

// publish numbers a batch, keeps it for replay and sends it, unless a fault drops or
// stops it. payload is copied.
func (p *publisher) publish(payload []byte, f *Faults, rng *rand.Rand) {
	buf := make([]byte, len(payload))
	copy(buf, payload)
	p.mu.Lock()
	seq := p.seq
	p.seq++
	if n := p.cfg.KVEventsBufferSteps; n > 0 {
		if len(p.ring) < n {
			p.ring = append(p.ring, replayEntry{seq, buf})
		} else {
			p.ring[p.head] = replayEntry{seq, buf}
			p.head = (p.head + 1) % n
		}
	}
	p.mu.Unlock()
	switch {
	case f.StopEvents:
		p.m.batchDropped("stopped")
		return
	case f.DropEventsFraction > 0 && rng.Float64() < f.DropEventsFraction:
		p.m.batchDropped("dropped")
		return
	}
	if p.pub == nil {
		return
	}
	msg := zmq4.NewMsgFrom(p.topic, seqFrame(seq), buf)
	if err := p.pub.SendMulti(msg); err != nil {
		p.m.batchDropped("send_error")
		p.log.Warn("KV events: send failed", "seq", seq, "err", err)
		return
	}
	p.m.batchPublished()
}

// nextSeq is the sequence number the next batch gets.
func (p *publisher) nextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// restart forgets the history: the next batch is seq 0 again.
func (p *publisher) restart() {
	p.mu.Lock()
	p.seq, p.ring, p.head = 0, nil, 0
	p.mu.Unlock()
}

// since returns the kept batches with seq ≥ start, oldest first.
func (p *publisher) since(start uint64) []replayEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []replayEntry
	n := len(p.ring)
	for i := range n {
		e := p.ring[(p.head+i)%n]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

// serveReplay answers DEALER replay requests until the publisher closes.
func (p *publisher) serveReplay() {
	defer p.wg.Done()
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue // a peer went away (zmq4 reports it as an error): keep serving
		}
		// [identity, "", start(8)]; tolerate a missing empty delimiter.
		frames := msg.Frames
		if len(frames) < 2 {
			p.m.replayBad()
			continue
		}
		id, rest := frames[0], frames[1:]
		if len(rest) > 0 && len(rest[0]) == 0 {
			rest = rest[1:]
		}
		if len(rest) != 1 || len(rest[0]) != 8 {
			p.m.replayBad()
			p.log.Warn("KV events replay: malformed request", "frames", len(frames))
			continue
		}
		start := binary.BigEndian.Uint64(rest[0])
		entries := p.since(start)
		p.m.replayServed(len(entries))
		for _, e := range entries {
			if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, p.topic, seqFrame(e.seq), e.payload)); err != nil {
				p.log.Warn("KV events replay: send failed", "err", err)
				break
			}
		}
		if err := p.replay.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte{}, seqFrame(endOfReplaySeq), []byte{})); err != nil {
			p.log.Warn("KV events replay: end marker failed", "err", err)
		}
	}
}
