package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/kvroute/kvroute/internal/openai"
	"github.com/kvroute/kvroute/kvblock"
	"github.com/kvroute/kvroute/tokenizer"
)

// reqState is one request's scratch space, pooled so that routing does not allocate.
type reqState struct {
	keys    []uint64
	groups  []keyGroup
	matches []indexMatch
	runs    []int // candidate → leading blocks the index shows
	cands   []Candidate
	group   []int // candidate → key group, -1 = none
	d       decision
}

// keyGroup is the key chain for candidates sharing a seed and block size.
type keyGroup struct {
	seed       uint64
	blockSize  int
	start, end int // in reqState.keys
}

// decision is the outcome of routing one request.
type decision struct {
	st       *reqState
	info     RouteInfo
	chosen   int
	why      Decision
	keysFrom int // first key index the chosen instance did not hold in the index
	// promptTokens is 0 when the prompt was not tokenized.
	promptTokens int
	predicted    int // predicted cached tokens on the chosen instance
	took         time.Duration
	sentAt       time.Time // current attempt
	firstSeen    bool      // current attempt's first byte booked
	// ids and salt are the prompt's token ids (nil when not tokenized) and cache_salt,
	// for the hot-prefix tracker when pre-warming is on.
	ids  []uint32
	salt string
}

func (d *decision) inst() *instance { return d.st.cands[d.chosen].inst }

// chosenKeys are the chosen instance's keys the index did not already show there.
func (d *decision) chosenKeys() []uint64 {
	g := d.st.group[d.chosen]
	if g < 0 {
		return nil
	}
	kg := d.st.groups[g]
	from := kg.start + d.keysFrom
	if from > kg.end {
		from = kg.end
	}
	return d.st.keys[from:kg.end]
}

// affinityHash hashes the routing group, the model and the prompt prefix.
type affinityHash struct{ d xxhash.Digest }

func newAffinity(group, model string) *affinityHash {
	a := &affinityHash{}
	a.d.Reset()
	_, _ = a.d.WriteString(group)
	_, _ = a.d.Write([]byte{0})
	_, _ = a.d.WriteString(model)
	_, _ = a.d.Write([]byte{0})
	return a
}

// writePrefix writes at most n characters (runes) of s and returns how many remain.
func (a *affinityHash) writePrefix(s string, n int) int {
	if n <= 0 {
		return 0
	}
	if len(s) <= n { // fewer bytes than characters asked: whole string
		_, _ = a.d.WriteString(s)
		return n - utf8.RuneCountInString(s)
	}
	i, c := 0, 0
	for i < len(s) && c < n {
		if s[i] < utf8.RuneSelf {
			i++
		} else {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
		}
		c++
	}
	_, _ = a.d.WriteString(s[:i])
	return n - c
}

// writeCanonical writes the first n characters of openai.Request.CanonicalText without
// building it.
func (a *affinityHash) writeCanonical(req *openai.Request, n int) {
	if req.Kind == openai.KindCompletion {
		a.writePrefix(req.Prompt, n)
		return
	}
	for _, m := range req.Messages {
		role, _ := m["role"].(string)
		if n = a.writePrefix(role, n); n <= 0 {
			return
		}
		if n = a.writePrefix("\x1f", n); n <= 0 {
			return
		}
		switch c := m["content"].(type) {
		case string:
			n = a.writePrefix(c, n)
		case []any:
			sep := false
			for _, p := range c {
				pm, _ := p.(map[string]any)
				t, ok := pm["text"].(string)
				if !ok {
					continue
				}
				if sep {
					if n = a.writePrefix("\n", n); n <= 0 {
						return
					}
				}
				sep = true
				if n = a.writePrefix(t, n); n <= 0 {
					return
				}
			}
		}
		if n <= 0 {
			return
		}
		if n = a.writePrefix("\x1e", n); n <= 0 {
			return
		}
	}
}

func (a *affinityHash) writeIDs(ids []uint32, n int) {
	var b [4]byte
	for _, id := range ids[:min(n, len(ids))] {
		b[0], b[1], b[2], b[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		_, _ = a.d.Write(b[:])
	}
}

// score is an instance's rendezvous weight for affinity hash h.
func score(h, idHash uint64) uint64 {
	x := h ^ idHash
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// groupOf returns the routing group: the group header, else prompt_cache_key.
func (r *Router) groupOf(h http.Header, req *openai.Request) string {
	if g := h.Get(r.cfg.GroupHeader); g != "" {
		return g
	}
	if req != nil {
		return req.PromptCacheKey
	}
	return ""
}

// candidates fills st.cands with the available instances serving model ("" = all),
// leaving out newcomers being pre-warmed unless nothing else can take the request, and
// returns ErrUnknownModel, ErrNoInstance or ErrOverloaded when none can take it.
func (r *Router) candidates(st *reqState, model string, affinity uint64, now int64) error {
	f := r.fleet.Load()
	list := f.list
	if model != "" {
		list = f.byModel[model]
		if len(list) == 0 {
			if len(f.list) == 0 {
				return ErrNoInstance
			}
			return fmt.Errorf("%w: %q", ErrUnknownModel, model)
		}
	}
	healthy, warming := r.fill(st, list, affinity, now, false)
	if len(st.cands) == 0 && warming > 0 {
		// Only newcomers still being pre-warmed can take it: better them than an error.
		healthy, _ = r.fill(st, list, affinity, now, true)
	}
	if len(st.cands) == 0 {
		if healthy > 0 {
			return ErrOverloaded
		}
		return ErrNoInstance
	}
	return nil
}

// fill puts the available instances of list below the hard limit into st.cands, those
// being pre-warmed only with withWarming; it returns how many were available and how
// many of those it left out for pre-warming.
func (r *Router) fill(st *reqState, list []*instance, affinity uint64, now int64, withWarming bool) (healthy, warming int) {
	st.cands = st.cands[:0]
	for _, in := range list {
		if !in.health.available(now) || in.desc.Load() == nil {
			continue
		}
		if !withWarming && in.prewarm.active.Load() {
			warming++
			continue
		}
		healthy++
		load := in.load()
		if r.cfg.HardInFlightLimit > 0 && load >= r.cfg.HardInFlightLimit {
			continue
		}
		st.cands = append(st.cands, Candidate{
			ID: in.id, InFlight: load, Waiting: int(in.waiting.Load()),
			Score: score(affinity, in.idHash), inst: in,
		})
	}
	return healthy, warming
}

// routeOpenAI decides where a parsed chat or completion request goes.
func (r *Router) routeOpenAI(ctx context.Context, h http.Header, req *openai.Request, start time.Time) (*decision, error) {
	st := r.scratch.Get().(*reqState)
	d := &st.d
	*d = decision{st: st, info: RouteInfo{Model: req.Model, Group: r.groupOf(h, req)}}

	var res tokenizer.Result
	useIndex := r.cfg.Policy == PolicyKVAware && r.idx != nil
	tokenized := false
	if useIndex && (r.cfg.TokenizerMode != TokenizerNone || (req.Kind == openai.KindCompletion && req.HasPromptIDs)) {
		var err error
		res, err = req.Tokenize(ctx, r.tok)
		if err != nil {
			r.release(st)
			return nil, tokenizeError(err)
		}
		tokenized = true
		d.promptTokens = len(res.IDs)
		d.info.PromptTokens = len(res.IDs)
	}
	if r.hot != nil {
		switch {
		case tokenized:
			d.ids = res.IDs
		case req.Kind == openai.KindCompletion && req.HasPromptIDs:
			d.ids = req.PromptIDs
		}
		d.salt = req.CacheSalt
	}

	aff := newAffinity(d.info.Group, req.Model)
	switch {
	case req.Kind == openai.KindCompletion && req.HasPromptIDs:
		aff.writeIDs(req.PromptIDs, r.cfg.PrefixLengthChars)
	case r.cfg.Policy == PolicyKVAware && res.Prompt != "":
		aff.writePrefix(res.Prompt, r.cfg.PrefixLengthChars)
	default:
		aff.writeCanonical(req, r.cfg.PrefixLengthChars)
	}
	now := start.UnixNano()
	if err := r.candidates(st, req.Model, aff.d.Sum64(), now); err != nil {
		r.release(st)
		return nil, err
	}
	if tokenized {
		r.predict(st, req, res.IDs, now)
	} else {
		st.group = st.group[:0]
		for i := range st.cands {
			st.group = append(st.group, -1)
			st.cands[i].PredictedTTFT = st.cands[i].inst.predictTTFT(0)
		}
	}
	d.chosen, d.why = r.policy.Select(&d.info, st.cands)
	if d.chosen < 0 { // only a misconfigured chain declines; overflow is the safety net
		d.chosen, d.why = Overflow{}.Select(&d.info, st.cands)
	}
	c := &st.cands[d.chosen]
	d.predicted = c.CachedTokens
	if g := st.group[d.chosen]; g >= 0 {
		d.keysFrom = st.runs[d.chosen]
	}
	d.took = time.Since(start)
	return d, nil
}

// predict computes the block keys per (seed, block size) group of candidates, looks the
// index up once per group (once in a uniform fleet), adds the pending overlay, and fills
// each candidate's CachedTokens and PredictedTTFT; st.runs[i] is candidate i's index run
// (the pending overlay continues from there).
func (r *Router) predict(st *reqState, req *openai.Request, ids []uint32, now int64) {
	st.keys, st.groups, st.group = st.keys[:0], st.groups[:0], st.group[:0]
	for i := range st.cands {
		dsc := st.cands[i].inst.desc.Load()
		seed := seedFor(dsc, req.Model, req.CacheSalt)
		bs := dsc.blockSize
		if bs <= 0 {
			bs = kvblock.DefaultBlockSize
		}
		g := -1
		for j := range st.groups {
			if st.groups[j].seed == seed && st.groups[j].blockSize == bs {
				g = j
				break
			}
		}
		if g < 0 {
			startKey := len(st.keys)
			st.keys = kvblock.Keys(st.keys, seed, ids, bs)
			st.groups = append(st.groups, keyGroup{seed: seed, blockSize: bs, start: startKey, end: len(st.keys)})
			g = len(st.groups) - 1
		}
		st.group = append(st.group, g)
	}
	st.runs = st.runs[:0]
	for range st.cands {
		st.runs = append(st.runs, 0)
	}
	for g := range st.groups {
		kg := st.groups[g]
		if kg.end == kg.start {
			continue
		}
		st.matches = r.idx.lookup(st.keys[kg.start:kg.end], st.matches[:0])
		for _, m := range st.matches {
			for i := range st.cands {
				if st.group[i] == g && st.cands[i].ID == m.Instance {
					st.runs[i] = m.Blocks
				}
			}
		}
	}
	for i := range st.cands {
		c := &st.cands[i]
		kg := st.groups[st.group[i]]
		keys := st.keys[kg.start:kg.end]
		run := min(st.runs[i], len(keys))
		st.runs[i] = run
		if run < len(keys) {
			run += r.pending.run(keys[run:], c.inst.slot, now)
		}
		// vLLM recomputes at least the last prompt token: at most (n-1)/B blocks hit.
		maxBlocks := 0
		if len(ids) > 0 {
			maxBlocks = (len(ids) - 1) / kg.blockSize
		}
		c.CachedTokens = min(run, maxBlocks) * kg.blockSize
		c.PredictedTTFT = c.inst.predictTTFT(len(ids) - c.CachedTokens)
	}
}

// seedFor is the block-key seed of a request for model on an instance described by d.
func seedFor(d *descriptor, model, salt string) uint64 {
	if model == d.model {
		return kvblock.Seed(model, "", salt)
	}
	return kvblock.Seed(d.model, model, salt)
}

func (r *Router) release(st *reqState) {
	for i := range st.cands {
		st.cands[i].inst = nil
	}
	st.d = decision{}
	r.scratch.Put(st)
}

func tokenizeError(err error) error {
	var oe *openai.Error
	if errors.As(err, &oe) || errors.Is(err, ErrNoInstance) {
		return err
	}
	if errors.Is(err, tokenizer.ErrEngine) {
		return fmt.Errorf("%w: %w: %v", ErrUpstream, ErrTokenize, err)
	}
	return fmt.Errorf("%w: %v", ErrTokenize, err)
}

// trimURL is the canonical form of an engine base URL.
func trimURL(s string) string { return strings.TrimRight(s, "/") }
