package hf

import (
	"encoding/json"
	"fmt"
)

// Config is what tokenizer_config.json says about rendering prompts.
type Config struct {
	// ChatTemplate is the Jinja chat template ("" when there is none):
	// the template itself, or the one named "default" when the file lists
	// several.
	ChatTemplate string
	// BOSToken and EOSToken are the texts of the special tokens the
	// template may refer to as bos_token and eos_token ("" when unset).
	BOSToken, EOSToken string
}

// ParseConfig reads the contents of a tokenizer_config.json.
func ParseConfig(data []byte) (Config, error) {
	var raw struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOSToken     json.RawMessage `json:"bos_token"`
		EOSToken     json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("hf: tokenizer_config.json: %w", err)
	}
	var c Config
	var err error
	if c.ChatTemplate, err = chatTemplate(raw.ChatTemplate); err != nil {
		return Config{}, err
	}
	if c.BOSToken, err = tokenText(raw.BOSToken); err != nil {
		return Config{}, fmt.Errorf("hf: tokenizer_config.json: bos_token: %w", err)
	}
	if c.EOSToken, err = tokenText(raw.EOSToken); err != nil {
		return Config{}, fmt.Errorf("hf: tokenizer_config.json: eos_token: %w", err)
	}
	return c, nil
}

func chatTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("hf: tokenizer_config.json: chat_template is neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("hf: tokenizer_config.json: chat_template lists no template named \"default\"")
}

// tokenText reads a special token written as a string or as an added
// token object with a content field.
func tokenText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("neither a string nor a token object")
	}
	return obj.Content, nil
}
