package bench

import (
	"context"
	"fmt"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// TracePrompts tokenizes every request of t exactly as the router and the engines do
// (internal/openai parsing, then tok), and seeds its block keys with the request's model
// and cache_salt. The result feeds Oracle.
func TracePrompts(ctx context.Context, tok tokenizer.Tokenizer, t *Trace) ([]Prompt, error) {
	out := make([]Prompt, len(t.Requests))
	for i := range t.Requests {
		r := &t.Requests[i]
		var (
			req *openai.Request
			err error
		)
		if r.Path == PathCompletion {
			req, err = openai.ParseCompletion(r.Body)
		} else {
			req, err = openai.ParseChat(r.Body)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: request %d: %w", ErrWorkload, i, err)
		}
		res, err := req.Tokenize(ctx, tok)
		if err != nil {
			return nil, fmt.Errorf("%w: request %d: tokenize: %w", ErrWorkload, i, err)
		}
		out[i] = Prompt{Seed: kvblock.Seed(req.Model, "", req.CacheSalt), IDs: res.IDs}
	}
	return out, nil
}
