package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// tokenizerFile is the part of a Hugging Face tokenizer.json the package reads.
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	Model         json.RawMessage  `json:"model"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
}

type addedTokenJSON struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// component is the common envelope of every tokenizer.json component.
type component struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func componentType(raw json.RawMessage) (string, error) {
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", err
	}
	return c.Type, nil
}

// tokenizerConfig is the part of tokenizer_config.json the package reads.
type tokenizerConfig struct {
	ChatTemplate            json.RawMessage `json:"chat_template"`
	BOSToken                json.RawMessage `json:"bos_token"`
	EOSToken                json.RawMessage `json:"eos_token"`
	PadToken                json.RawMessage `json:"pad_token"`
	UNKToken                json.RawMessage `json:"unk_token"`
	AddBOSToken             *bool           `json:"add_bos_token"`
	CleanUpTokenizationSpcs *bool           `json:"clean_up_tokenization_spaces"`
	NameOrPath              string          `json:"name_or_path"`
}

// tokenString reads a special token entry, which is either a string or an
// AddedToken object {"content": ...}; null gives "".
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("special token %s: %w", truncateForError(string(raw)), err)
	}
	return obj.Content, nil
}

// chatTemplateSource reads chat_template, which is a string or a list of named
// templates [{"name": "default", "template": ...}, ...]; the "default" one is used.
func chatTemplateSource(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	names := make([]string, len(named))
	for i, n := range named {
		names[i] = n.Name
	}
	return "", fmt.Errorf("%w: chat_template has no \"default\" entry (have %s)", ErrUnsupported, strings.Join(names, ", "))
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
