package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type unicodeNormalizer struct{ form norm.Form }

func (n unicodeNormalizer) normalize(s string) string { return n.form.String(s) }

type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) string { return strings.ToLower(s) }

type prependNormalizer struct{ prefix string }

func (p prependNormalizer) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

type replaceNormalizer struct{ old, new string }

func (r replaceNormalizer) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

type sequenceNormalizer []normalizer

func (q sequenceNormalizer) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// parseNormalizer builds the normalizer of tokenizer.json; nil means none.
func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch typ {
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "Prepend":
		var p struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prependNormalizer{p.Prepend}, nil
	case "Replace":
		var r struct {
			Pattern struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			} `json:"pattern"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		if r.Pattern.String == nil {
			return nil, fmt.Errorf("%w: normalizer Replace with a Regex pattern", ErrUnsupported)
		}
		return replaceNormalizer{*r.Pattern.String, r.Content}, nil
	case "Sequence":
		var q struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var seq sequenceNormalizer
		for _, sub := range q.Normalizers {
			n, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	default:
		return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, typ)
	}
}
