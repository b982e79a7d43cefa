package tokenizer

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"sync"
)

// DefaultModelName is the served name of the embedded tokenizer's model.
const DefaultModelName = "Qwen/Qwen3-0.6B"

// The embedded default: Qwen3's tokenizer (Apache-2.0, see models/qwen3/NOTICE).
var (
	//go:embed models/qwen3/tokenizer.json.gz
	qwen3TokenizerGz []byte
	//go:embed models/qwen3/tokenizer_config.json.gz
	qwen3ConfigGz []byte
)

var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error
)

// Default returns the embedded Qwen3 tokenizer (served as DefaultModelName) with
// DefaultConfig. It is parsed once, on first use, and shared; use WithConfig for
// other limits.
func Default() (*Model, error) {
	defaultOnce.Do(func() {
		defaultModel, defaultErr = loadEmbedded()
	})
	return defaultModel, defaultErr
}

func loadEmbedded() (*Model, error) {
	tj, err := gunzip(qwen3TokenizerGz)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: embedded tokenizer.json: %w", err)
	}
	tc, err := gunzip(qwen3ConfigGz)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: embedded tokenizer_config.json: %w", err)
	}
	c, err := parseCore(tj, tc)
	if err != nil {
		return nil, err
	}
	c.name = DefaultModelName
	return newModel(c, DefaultConfig())
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return io.ReadAll(zr)
}
