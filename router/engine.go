package router

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/kvroute/kvroute/tokenizer"
)

// engineTokenizer implements tokenizer.Tokenizer for TokenizerMode engine: it asks the
// /tokenize of an available instance serving the model, over that instance's own
// keep-alive pool. Exact, at the cost of one round trip per request.
type engineTokenizer struct {
	r       *Router
	mu      sync.Mutex
	engines map[*instance]*tokenizer.Engine
}

func newEngineTokenizer(r *Router) *engineTokenizer {
	return &engineTokenizer{r: r, engines: map[*instance]*tokenizer.Engine{}}
}

func (t *engineTokenizer) pick(model string) (*tokenizer.Engine, error) {
	now := time.Now().UnixNano()
	for _, in := range t.r.fleet.Load().byModel[model] {
		if !in.health.available(now) {
			continue
		}
		t.mu.Lock()
		e := t.engines[in]
		if e == nil {
			e = tokenizer.NewEngine(in.rawURL, in.client)
			t.engines[in] = e
		}
		t.mu.Unlock()
		return e, nil
	}
	return nil, fmt.Errorf("%w: no available instance serves %q to tokenize", ErrNoInstance, model)
}

func (t *engineTokenizer) Chat(ctx context.Context, model string, req *tokenizer.ChatRequest) (tokenizer.Result, error) {
	e, err := t.pick(model)
	if err != nil {
		return tokenizer.Result{}, err
	}
	return e.Chat(ctx, model, req)
}

func (t *engineTokenizer) Completion(ctx context.Context, model, prompt string, addSpecial bool) (tokenizer.Result, error) {
	e, err := t.pick(model)
	if err != nil {
		return tokenizer.Result{}, err
	}
	return e.Completion(ctx, model, prompt, addSpecial)
}

var _ tokenizer.Tokenizer = (*engineTokenizer)(nil)
