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
// tokenizer.json is embedded in its compact form (compact.go), generated from the
// committed models/qwen3/tokenizer.json.gz; tokenizer_config.json as it is.
//
//go:generate go test -run ^TestCompactEmbeddedCurrent$ -update-compact .
var (
	//go:embed models/qwen3/tokenizer.compact
	qwen3Compact []byte
	//go:embed models/qwen3/tokenizer_config.json.gz
	qwen3ConfigGz []byte
)

var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error
)

// Default returns the embedded Qwen3 tokenizer (served as DefaultModelName) with
// DefaultConfig. It is loaded once, on first use, and shared; use WithConfig for
// other limits.
func Default() (*Model, error) {
	defaultOnce.Do(func() {
		defaultModel, defaultErr = loadEmbedded()
	})
	return defaultModel, defaultErr
}

func loadEmbedded() (*Model, error) {
	tc, err := gunzip(qwen3ConfigGz)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: embedded tokenizer_config.json: %w", err)
	}
	c, err := parseCompactCore(qwen3Compact, tc)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: embedded tokenizer: %w", err)
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
