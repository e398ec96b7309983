package wire

import (
	"encoding/json"
	"slices"
)

// Request options that OpenAI's Responses API takes and turnpike has
// nothing to do with (the engine caches prefixes by itself, moderation
// and access programs are OpenAI's): they are
// accepted, so that clients that send them work, and checked as strictly
// as the fields turnpike reads, so that a malformed one is still a 400
// naming it.

// acceptedOptions checks each such top-level field; param is its name.
var acceptedOptions = map[string]check{
	// client_metadata is the Codex CLI's: string pairs about the client.
	"client_metadata": func(raw json.RawMessage, p string) error {
		f, err := decodeObject(raw, p)
		if err != nil {
			return err
		}
		for _, k := range sortedKeys(f) {
			if _, err := decodeString(f[k], p+"."+k); err != nil {
				return err
			}
		}
		return nil
	},
	"prompt_cache_options": func(raw json.RawMessage, p string) error {
		return checkObject(raw, p, fields{
			"comparison_response_id": {str, false},
			"prewarm":                {boolean, false},
			"mode":                   {enum("implicit", "explicit"), false},
			"ttl":                    {enum("30m", "12h"), false},
		})
	},
	"moderation": func(raw json.RawMessage, p string) error {
		mode := func(raw json.RawMessage, p string) error {
			return checkObject(raw, p, fields{"mode": {enum("score", "block"), true}})
		}
		return checkObject(raw, p, fields{
			"model": {str, true},
			"policy": {func(raw json.RawMessage, p string) error {
				return checkObject(raw, p, fields{"input": {mode, false}, "output": {mode, false}})
			}, false},
		})
	},
	"access_programs": func(raw json.RawMessage, p string) error {
		return checkObject(raw, p, fields{"cyber": {enum("standard", "daybreak_blue", "daybreak_red"), false}})
	},
	"image": func(raw json.RawMessage, p string) error {
		return checkObject(raw, p, fields{"context_compression": {enum("auto", "enabled", "disabled"), false}})
	},
	"stream_options": func(raw json.RawMessage, p string) error {
		return checkObject(raw, p, fields{"include_obfuscation": {boolean, false}})
	},
}

// includables are the values include takes.
var includables = []string{
	"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
	"message.input_image.image_url", "computer_call_output.output.image_url",
	"code_interpreter_call.outputs", "reasoning.encrypted_content", "message.output_text.logprobs",
}

// decodeContextManagement reads context_management: entries of type
// compaction, each with an optional compact_threshold in tokens; the
// lowest threshold given is the request's (0: none).
func decodeContextManagement(raw json.RawMessage) (int, error) {
	entries, err := decodeList(raw, "context_management", "an array", func(e json.RawMessage, ep string) (int, error) {
		if err := checkObject(e, ep, fields{
			"type":              {enum("compaction"), true},
			"compact_threshold": {integer(0), false},
		}); err != nil {
			return 0, err
		}
		f, _ := decodeObject(e, ep)
		if v, ok := f["compact_threshold"]; ok && !isNull(v) {
			return decodeInt(v, ep+".compact_threshold", 0)
		}
		return 0, nil
	})
	threshold := 0
	for _, n := range entries {
		if n > 0 && (threshold == 0 || n < threshold) {
			threshold = n
		}
	}
	return threshold, err
}

// decodePrompt checks a reference to a stored prompt template: its id,
// version and variables (strings, or input_text, input_image and
// input_file parts). Templates are stored by OpenAI; turnpike has none to
// expand, so the request's own instructions and input are what the engine
// sees, and the reference is echoed.
func decodePrompt(raw json.RawMessage) error {
	return checkObject(raw, "prompt", fields{
		"id":      {str, true},
		"version": {str, false},
		"variables": {func(raw json.RawMessage, p string) error {
			f, err := decodeObject(raw, p)
			if err != nil {
				return err
			}
			for _, k := range sortedKeys(f) {
				v, vp := f[k], p+"."+k
				if kindOf(v) == "a string" {
					continue
				}
				if kindOf(v) != "an object" {
					return typeError(vp, "a string or an input content part", v)
				}
				vf, _ := decodeObject(v, vp)
				typ, err := decodeEnum(vf["type"], vp+".type", "input_text", "input_image", "input_file")
				if err != nil {
					return err
				}
				if typ == "input_text" {
					if err := checkObject(v, vp, fields{"type": {nil, true}, "text": {str, true}}); err != nil {
						return err
					}
				}
			}
			return nil
		}, false},
	})
}

// check validates one value; param names it in errors.
type check func(raw json.RawMessage, param string) error

// field is one field of an object checkObject validates: its check (nil
// accepts any value) and whether it must be there.
type field struct {
	check    check
	required bool
}

type fields map[string]field

// checkObject validates an object field by field, in name order so that
// the same bad value always names the same param: an unknown field is an
// error, a null one is absent.
func checkObject(raw json.RawMessage, param string, spec fields) error {
	f, err := decodeObject(raw, param)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(spec))
	for k := range spec {
		names = append(names, k)
	}
	slices.Sort(names)
	if err := allowKeys(f, param, names...); err != nil {
		return err
	}
	for _, k := range names {
		v, ok := f[k]
		switch {
		case !ok || isNull(v):
			if spec[k].required {
				return Invalidf(param+"."+k, "missing_required_parameter", "Missing required parameter: '%s.%s'.", param, k)
			}
		case spec[k].check != nil:
			if err := spec[k].check(v, param+"."+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// optionalEnum checks f[k], when present, against values; prefix is the
// param path of f ("reasoning.").
func optionalEnum(f map[string]json.RawMessage, prefix, k string, values ...string) error {
	if v, ok := f[k]; ok && !isNull(v) {
		_, err := decodeEnum(v, prefix+k, values...)
		return err
	}
	return nil
}

func sortedKeys(f map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func str(raw json.RawMessage, p string) error {
	_, err := decodeString(raw, p)
	return err
}

func boolean(raw json.RawMessage, p string) error {
	_, err := decodeBool(raw, p)
	return err
}

func enum(values ...string) check {
	return func(raw json.RawMessage, p string) error {
		_, err := decodeEnum(raw, p, values...)
		return err
	}
}

func integer(lo int) check {
	return func(raw json.RawMessage, p string) error {
		_, err := decodeInt(raw, p, lo)
		return err
	}
}
