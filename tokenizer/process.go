package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds the special tokens of add_special_tokens around a sequence.
type postProcessor struct {
	prefix, suffix []uint32
}

func parsePostProcessor(raw json.RawMessage, p *postProcessor) error {
	if isNull(raw) {
		return nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	switch typ {
	case "ByteLevel":
		return nil // only adjusts offsets, never ids
	case "Sequence":
		var q struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("post_processor Sequence: %w", err)
		}
		for _, sub := range q.Processors {
			if err := parsePostProcessor(sub, p); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		var t struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []uint32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("post_processor TemplateProcessing: %w", err)
		}
		if len(p.prefix)+len(p.suffix) > 0 {
			return fmt.Errorf("%w: post_processor with two TemplateProcessing steps", ErrUnsupported)
		}
		seen := false
		for _, item := range t.Single {
			switch {
			case item.Sequence != nil:
				if seen {
					return fmt.Errorf("%w: post_processor TemplateProcessing with the sequence twice", ErrUnsupported)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := t.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("post_processor TemplateProcessing: special token %q not defined", item.SpecialToken.ID)
				}
				if seen {
					p.suffix = append(p.suffix, st.IDs...)
				} else {
					p.prefix = append(p.prefix, st.IDs...)
				}
			}
		}
		if !seen {
			return fmt.Errorf("post_processor TemplateProcessing: single template has no sequence")
		}
		return nil
	default:
		return fmt.Errorf("%w: post_processor %q", ErrUnsupported, typ)
	}
}

// parseDecoder checks the decoder is one the package reproduces: ByteLevel, alone
// or in a Sequence.
func parseDecoder(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("%w: no decoder (a byte-level BPE needs the ByteLevel decoder)", ErrUnsupported)
	}
	typ, err := componentType(raw)
	if err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	switch typ {
	case "ByteLevel":
		return nil
	case "Sequence":
		var q struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("decoder Sequence: %w", err)
		}
		for _, sub := range q.Decoders {
			if err := parseDecoder(sub); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: decoder %q", ErrUnsupported, typ)
	}
}
