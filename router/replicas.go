package router

import (
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	kvroutev1 "github.com/kvroute/kvroute/proto/kvroute/v1"
)

// peers shares in-flight counts between router replicas: every replica publishes its own
// per-instance counts on kvroute.v1.inflight.<router-id> each InFlightPublishInterval and
// adds the other replicas' fresh counts into instance.remote.
type peers struct {
	r   *Router
	sub *nats.Subscription

	mu     sync.Mutex
	others map[string]peerLoad
	stopCh chan struct{}
	wg     sync.WaitGroup
}

type peerLoad struct {
	at       time.Time // when we received it
	inFlight map[string]uint32
}

func newPeers(r *Router) *peers {
	return &peers{r: r, others: map[string]peerLoad{}, stopCh: make(chan struct{})}
}

func (p *peers) start() error {
	sub, err := p.r.nc.Subscribe(kvroutev1.SubjectInFlight+"*", p.receive)
	if err != nil {
		return err
	}
	p.sub = sub
	p.wg.Add(1)
	go p.run()
	return nil
}

func (p *peers) stop() {
	close(p.stopCh)
	p.wg.Wait()
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}

func (p *peers) run() {
	defer p.wg.Done()
	t := time.NewTicker(p.r.cfg.InFlightPublishInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopCh:
			return
		case <-t.C:
			p.publish()
			p.sumRemote(time.Now())
		}
	}
}

// publish sends this replica's non-zero in-flight counts (an empty map is still sent, so
// peers learn the counts dropped to zero).
func (p *peers) publish() {
	msg := &kvroutev1.RouterLoad{RouterId: p.r.cfg.RouterID, InFlight: map[string]uint32{}, SentAtUnixNano: time.Now().UnixNano()}
	for _, in := range p.r.fleet.Load().list {
		if n := in.inFlight.Load(); n > 0 {
			msg.InFlight[in.id] = uint32(n)
		}
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		return
	}
	_ = p.r.nc.Publish(kvroutev1.SubjectInFlight+p.r.cfg.RouterID, b)
}

func (p *peers) receive(m *nats.Msg) {
	var msg kvroutev1.RouterLoad
	if err := proto.Unmarshal(m.Data, &msg); err != nil {
		p.r.log.Warn("bad RouterLoad message", "subject", m.Subject, "err", err)
		return
	}
	id := msg.GetRouterId()
	if id == "" {
		id = strings.TrimPrefix(m.Subject, kvroutev1.SubjectInFlight)
	}
	if id == p.r.cfg.RouterID {
		return
	}
	p.mu.Lock()
	p.others[id] = peerLoad{at: time.Now(), inFlight: msg.GetInFlight()}
	p.mu.Unlock()
	p.sumRemote(time.Now())
}

// sumRemote recomputes every instance's remote in-flight from fresh peer reports.
func (p *peers) sumRemote(now time.Time) {
	f := p.r.fleet.Load()
	sums := make(map[string]int64, len(f.list))
	p.mu.Lock()
	for id, pl := range p.others {
		if now.Sub(pl.at) > p.r.cfg.InFlightStaleAfter {
			delete(p.others, id)
			continue
		}
		for inst, n := range pl.inFlight {
			sums[inst] += int64(n)
		}
	}
	p.mu.Unlock()
	for _, in := range f.list {
		in.remote.Store(sums[in.id])
	}
}

func (p *peers) count(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, pl := range p.others {
		if now.Sub(pl.at) <= p.r.cfg.InFlightStaleAfter {
			n++
		}
	}
	return n
}
