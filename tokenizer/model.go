package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// Config tunes a Model's limits and caches. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	// ModelName overrides the served model name Name reports ("" keeps the model's own).
	ModelName string
	// MaxInputBytes refuses longer texts and rendered prompts with ErrTooLarge.
	MaxInputBytes int
	// SegmentCacheEntries bounds the LRU of token ids per text segment (the text
	// between added tokens, e.g. one chat message); 0 disables it.
	SegmentCacheEntries int
	// SegmentCacheMinBytes and SegmentCacheMaxBytes bound which segments are cached:
	// shorter ones are cheaper to tokenize than to look up, longer ones would let a
	// few huge prompts hold the memory. Worst-case memory is about
	// SegmentCacheEntries × SegmentCacheMaxBytes × 2 (text plus ids).
	SegmentCacheMinBytes int
	SegmentCacheMaxBytes int
	// WordCacheEntries bounds the LRU of BPE results per pre-token; 0 disables it.
	WordCacheEntries int
}

// DefaultConfig returns the limits the package uses when none are given.
func DefaultConfig() Config {
	return Config{
		MaxInputBytes:        8 << 20,
		SegmentCacheEntries:  1024,
		SegmentCacheMinBytes: 64,
		SegmentCacheMaxBytes: 256 << 10,
		WordCacheEntries:     1 << 16,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxInputBytes <= 0:
		return fmt.Errorf("tokenizer: MaxInputBytes must be positive, got %d", c.MaxInputBytes)
	case c.SegmentCacheEntries < 0 || c.WordCacheEntries < 0:
		return fmt.Errorf("tokenizer: cache sizes must not be negative")
	case c.SegmentCacheMinBytes < 0 || c.SegmentCacheMaxBytes < c.SegmentCacheMinBytes:
		return fmt.Errorf("tokenizer: SegmentCacheMinBytes %d / SegmentCacheMaxBytes %d out of order",
			c.SegmentCacheMinBytes, c.SegmentCacheMaxBytes)
	}
	return nil
}

// core is the immutable, parsed tokenizer; Models with different Configs share it.
type core struct {
	name        string
	normalizer  normalizer
	pre         preTokenizer
	bpe         *bpeModel
	post        postProcessor
	addedByID   map[uint32]*addedToken
	rawMatcher  *addedMatcher // added tokens matched on the raw text
	normMatcher *addedMatcher // added tokens matched after normalization
	cleanUp     bool          // clean_up_tokenization_spaces on decode
	chat        *chatTemplate // nil when tokenizer_config.json has none
	specials    map[string]string
}

// Model is a local tokenizer for one model: tokenizer.json's pipeline plus
// tokenizer_config.json's chat template. It is safe for concurrent use.
type Model struct {
	c         *core
	cfg       Config
	segCache  *segmentCache
	wordCache *wordCache
	scratch   sync.Pool
	// disableNative forces the Jinja engine (tests compare the two).
	disableNative bool
}

var _ Tokenizer = (*Model)(nil)

// Load reads tokenizer.json and tokenizer_config.json from dir, with DefaultConfig.
func Load(dir string) (*Model, error) {
	return LoadConfig(dir, DefaultConfig())
}

// LoadConfig is Load with explicit limits.
func LoadConfig(dir string, cfg Config) (*Model, error) {
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tc, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	c, err := parseCore(tj, tc)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	if c.name == "" {
		c.name = filepath.Base(filepath.Clean(dir))
	}
	return newModel(c, cfg)
}

// WithConfig returns a Model that shares m's parsed tokenizer but has its own
// limits and caches.
func (m *Model) WithConfig(cfg Config) (*Model, error) {
	return newModel(m.c, cfg)
}

func newModel(c *core, cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{c: c, cfg: cfg}
	if cfg.SegmentCacheEntries > 0 {
		m.segCache = newSegmentCache(cfg.SegmentCacheEntries)
	}
	if cfg.WordCacheEntries > 0 {
		m.wordCache = newWordCache(cfg.WordCacheEntries)
	}
	m.scratch.New = func() any { return new(scratch) }
	return m, nil
}

// parseCore builds the pipeline from the two files' bytes. Every component it
// cannot reproduce exactly is an ErrUnsupported error naming it.
func parseCore(tokenizerJSON, configJSON []byte) (*core, error) {
	f, body, err := decodeTokenizerJSON(tokenizerJSON)
	if err != nil {
		return nil, err
	}
	return buildCore(f, body, configJSON)
}

// decodeTokenizerJSON decodes tokenizer.json: with the fast scanner (body holds
// the BPE vocabulary and merges, f.Model the rest of the model object) or, for
// anything the scanner leaves to it, with encoding/json alone (body nil).
func decodeTokenizerJSON(data []byte) (*tokenizerFile, *bpeBody, error) {
	if skeleton, body, ok := scanTokenizerJSON(data); ok {
		var f tokenizerFile
		if json.Unmarshal(skeleton, &f) == nil {
			return &f, body, nil
		}
	}
	var f tokenizerFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return &f, nil, nil
}

// buildCore builds the pipeline from the decoded tokenizer.json (see parseBPE for
// body) and tokenizer_config.json's bytes.
func buildCore(f *tokenizerFile, body *bpeBody, configJSON []byte) (*core, error) {
	if !isNull(f.Truncation) || !isNull(f.Padding) {
		// Both change ids only for batch/length options vLLM does not use for
		// prompts; refuse rather than guess.
		return nil, fmt.Errorf("%w: tokenizer.json truncation/padding settings", ErrUnsupported)
	}
	c := &core{addedByID: make(map[uint32]*addedToken), specials: make(map[string]string)}
	var err error
	if c.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err = parsePreTokenizer(f.PreTokenizer, &c.pre); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if isNull(f.Model) {
		return nil, fmt.Errorf("tokenizer: tokenizer.json has no model")
	}
	if c.bpe, err = parseBPE(f.Model, body); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !c.pre.byteLevel {
		return nil, fmt.Errorf("tokenizer: %w: BPE without a ByteLevel pre_tokenizer (not a byte-level BPE)", ErrUnsupported)
	}
	if err = parsePostProcessor(f.PostProcessor, &c.post); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var raw, normed []*addedToken
	for _, a := range f.AddedTokens {
		t := &addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip,
			rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
		c.addedByID[a.ID] = t
		if t.normalized && c.normalizer != nil {
			// Hugging Face matches these against the normalized text, so their
			// content is normalized too.
			t.content = c.normalizer.normalize(t.content)
			normed = append(normed, t)
		} else {
			raw = append(raw, t)
		}
	}
	c.rawMatcher = newAddedMatcher(raw)
	c.normMatcher = newAddedMatcher(normed)

	c.cleanUp = true // the reference's default when tokenizer_config.json says nothing
	if len(configJSON) > 0 {
		var tc tokenizerConfig
		if err := json.Unmarshal(configJSON, &tc); err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
		if tc.CleanUpTokenizationSpcs != nil {
			c.cleanUp = *tc.CleanUpTokenizationSpcs
		}
		c.name = tc.NameOrPath
		for name, raw := range map[string]json.RawMessage{"bos_token": tc.BOSToken, "eos_token": tc.EOSToken,
			"pad_token": tc.PadToken, "unk_token": tc.UNKToken} {
			s, err := tokenString(raw)
			if err != nil {
				return nil, fmt.Errorf("tokenizer: tokenizer_config.json %s: %w", name, err)
			}
			if s != "" {
				c.specials[name] = s
			}
		}
		src, err := chatTemplateSource(tc.ChatTemplate)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
		}
		if src != "" {
			if c.chat, err = compileChatTemplate(src); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// Name is the model name this tokenizer serves (e.g. "Qwen/Qwen3-0.6B").
func (m *Model) Name() string {
	if m.cfg.ModelName != "" {
		return m.cfg.ModelName
	}
	return m.c.name
}

// Config returns the limits m was built with.
func (m *Model) Config() Config { return m.cfg }

// HasChatTemplate reports whether the model has a chat template to render.
func (m *Model) HasChatTemplate() bool { return m.c.chat != nil }

// scratch is per-call working memory, pooled.
type scratch struct {
	segs   []segment
	hits   [][]uint32 // cached ids per segment of segs (nil: not cached)
	segs2  []segment
	words  []string
	pieces []string
	work   []uint32
}

// Encode tokenizes text. addSpecial adds the post-processor's tokens (Llama's
// BOS); vLLM uses true for completions and false for rendered chat prompts.
// Invalid UTF-8 is first replaced the way a JSON decoder would (see toValidUTF8).
func (m *Model) Encode(text string, addSpecial bool) ([]uint32, error) {
	if len(text) > m.cfg.MaxInputBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(text), m.cfg.MaxInputBytes)
	}
	return m.appendEncode(nil, text, addSpecial)
}

// AppendEncode is Encode appending to dst.
func (m *Model) AppendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	if len(text) > m.cfg.MaxInputBytes {
		return dst, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(text), m.cfg.MaxInputBytes)
	}
	return m.appendEncode(dst, text, addSpecial)
}

// appendEncode splits text on added tokens first and looks every long segment up
// in the segment cache: a hit proves the segment valid UTF-8 (cache keys are), the
// other segments are checked, and when all are valid the text is, so the split
// stands and the per-byte validation of long known prefixes is skipped. Otherwise
// the text is repaired (toValidUTF8) and split again. With dst nil the result is
// allocated once, sized from the cached ids.
func (m *Model) appendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error) {
	sc := m.scratch.Get().(*scratch)
	defer m.scratch.Put(sc)
	sc.segs = m.c.rawMatcher.split(sc.segs[:0], text)
	sc.hits = sc.hits[:0]
	valid := true
	need := len(m.c.post.prefix) + len(m.c.post.suffix)
	for _, seg := range sc.segs {
		var ids []uint32
		switch {
		case seg.token != nil:
			need++
		case m.segCacheable(seg.text):
			var ok bool
			if ids, ok = m.segCache.get(seg.text); ok {
				need += len(ids)
				break
			}
			fallthrough
		default:
			valid = valid && utf8.ValidString(seg.text)
			need += len(seg.text)/3 + 1
		}
		sc.hits = append(sc.hits, ids)
	}
	if !valid {
		text = toValidUTF8(text)
		sc.segs = m.c.rawMatcher.split(sc.segs[:0], text)
		clear(sc.hits)
		sc.hits = sc.hits[:0]
		for range sc.segs {
			sc.hits = append(sc.hits, nil)
		}
	}
	if dst == nil {
		dst = make([]uint32, 0, need)
	}
	if addSpecial {
		dst = append(dst, m.c.post.prefix...)
	}
	var err error
	for i, seg := range sc.segs {
		switch {
		case seg.token != nil:
			dst = append(dst, seg.token.id)
		case sc.hits[i] != nil:
			dst = append(dst, sc.hits[i]...)
		default:
			if dst, err = m.encodeSegment(dst, seg.text, sc); err != nil {
				clear(sc.hits)
				return dst, err
			}
		}
	}
	clear(sc.hits) // do not pin cached ids from the pool
	if addSpecial {
		dst = append(dst, m.c.post.suffix...)
	}
	return dst, nil
}

func (m *Model) segCacheable(text string) bool {
	return m.segCache != nil && len(text) >= m.cfg.SegmentCacheMinBytes && len(text) <= m.cfg.SegmentCacheMaxBytes
}

// encodeSegment tokenizes valid text that holds no raw-matched added token and
// caches the result when it is long enough.
func (m *Model) encodeSegment(dst []uint32, text string, sc *scratch) ([]uint32, error) {
	start := len(dst)
	normed := text
	if m.c.normalizer != nil {
		normed = m.c.normalizer.normalize(text)
	}
	var err error
	sc.segs2 = m.c.normMatcher.split(sc.segs2[:0], normed)
	for _, seg := range sc.segs2 {
		if seg.token != nil {
			dst = append(dst, seg.token.id)
			continue
		}
		sc.words, sc.pieces = m.c.pre.split(sc.words[:0], seg.text, sc.pieces)
		for _, w := range sc.words {
			if dst, err = m.encodeWord(dst, w, sc); err != nil {
				return dst, err
			}
		}
	}
	if m.segCacheable(text) {
		m.segCache.add(strings.Clone(text), dst[start:])
	}
	return dst, nil
}

// maxCachedWordBytes keeps pathological pre-tokens (megabytes without a space)
// out of the word cache.
const maxCachedWordBytes = 256

func (m *Model) encodeWord(dst []uint32, w string, sc *scratch) ([]uint32, error) {
	if w == "" {
		return dst, nil
	}
	cacheable := m.wordCache != nil && len(w) > 1 && len(w) <= maxCachedWordBytes
	if cacheable {
		if ids, ok := m.wordCache.get(w); ok {
			return append(dst, ids...), nil
		}
	}
	start := len(dst)
	var err error
	dst, sc.work, err = m.c.bpe.encodeWord(dst, w, sc.work)
	if err != nil {
		return dst, err
	}
	if cacheable {
		m.wordCache.add(strings.Clone(w), dst[start:])
	}
	return dst, nil
}

// Decode turns ids back into text. skipSpecial leaves out added tokens marked
// special. Bytes that do not form UTF-8 become U+FFFD, like the reference.
func (m *Model) Decode(ids []uint32, skipSpecial bool) (string, error) {
	var buf []byte
	for _, id := range ids {
		if t, ok := m.c.addedByID[id]; ok {
			if skipSpecial && t.special {
				continue
			}
			var ok bool
			if buf, ok = byteLevelDecode(buf, t.content); !ok {
				buf = append(buf, t.content...)
			}
			continue
		}
		// tokBytes tokens are stored as their raw bytes, the others as their
		// text: either way the bytes to append.
		tok, kind := m.c.bpe.vocab.token(id)
		if kind == tokAbsent {
			return "", fmt.Errorf("tokenizer: decode: id %d is not in the vocabulary", id)
		}
		buf = append(buf, tok...)
	}
	text := lossyUTF8(buf)
	if m.c.cleanUp {
		text = cleanUpTokenization(text)
	}
	return text, nil
}

// cleanUpTokenization is clean_up_tokenization_spaces: the reference applies the
// replacements one after the other over the whole text.
func cleanUpTokenization(s string) string {
	for _, p := range [][2]string{{" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
		{" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}} {
		s = strings.ReplaceAll(s, p[0], p[1])
	}
	return s
}

// Completion tokenizes a completion prompt (the Tokenizer interface).
func (m *Model) Completion(ctx context.Context, _ string, prompt string, addSpecialTokens bool) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	ids, err := m.Encode(prompt, addSpecialTokens)
	if err != nil {
		return Result{}, err
	}
	return Result{Prompt: prompt, IDs: ids}, nil
}

// Chat renders the chat template and tokenizes the result (the Tokenizer interface).
func (m *Model) Chat(ctx context.Context, _ string, req *ChatRequest) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	prompt, err := m.RenderChat(req)
	if err != nil {
		return Result{}, err
	}
	ids, err := m.Encode(prompt, req.AddSpecialTokens)
	if err != nil {
		return Result{}, err
	}
	return Result{Prompt: prompt, IDs: ids}, nil
}
