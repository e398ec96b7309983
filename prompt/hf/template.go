package hf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// ErrTemplate is wrapped by errors of compiling or rendering a chat
// template, including a template's own raise_exception.
var ErrTemplate = errors.New("hf: chat template")

// Template is a model's Jinja chat template, rendered as the Hugging Face
// transformers library's apply_chat_template does: blocks trimmed and
// left-stripped, the messages, tools and add_generation_prompt variables,
// bos_token and eos_token, raise_exception, and a tojson filter that
// writes Python's json.dumps format with object keys in the order the
// request gave them. It is safe for concurrent use.
type Template struct {
	tpl    *exec.Template
	cfg    Config
	native native // nil: every call runs the Jinja engine
}

// env is the environment every template runs in: gonja's builtins with
// tojson replaced.
var env = func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", filterToJSON); err != nil {
		panic(err)
	}
	ctx := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	ctx.Set("raise_exception", raiseException)
	ctx.Set("strftime_now", func(format string) string { return strftime(time.Now(), format) })
	methods := builtins.Methods
	methods.Str = stringMethods()
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           methods,
	}
}()

// list is a template list. Its GetItem indexes from the end as Python
// does: gonja finds no item at index -n of a list of n.
type list []any

// GetItem implements exec.ItemGetter.
func (l list) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.ToValue(reflect.ValueOf(l).Index(i)), true
}

// stringMethods is gonja's string methods with the lists that split,
// rsplit, splitlines and partition return made lists of ours.
func stringMethods() *exec.MethodSet[string] {
	names := strings.Fields(`capitalize casefold center count encode endswith expandtabs find format
		format_map isalnum isalpha isascii isdecimal isdigit islower isnumeric isprintable isspace
		istitle isupper join ljust lower lstrip partition removeprefix removesuffix replace rfind
		rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title upper zfill`)
	m := make(map[string]exec.Method[string], len(names))
	for _, name := range names {
		orig, ok := builtins.Methods.Str.Get(name)
		if !ok {
			continue
		}
		m[name] = func(self string, v *exec.Value, args *exec.VarArgs) (any, error) {
			out, err := orig(self, v, args)
			if rv := reflect.ValueOf(out); rv.Kind() == reflect.Slice {
				l := make(list, rv.Len())
				for i := range l {
					if e := rv.Index(i); e.Kind() == reflect.String {
						l[i] = e.String()
					} else {
						l[i] = e.Interface()
					}
				}
				return l, err
			}
			return out, err
		}
	}
	return exec.NewMethodSet(m)
}

// templateConfig is jinja2's configuration as transformers sets it.
func templateConfig() *config.Config {
	c := config.New()
	c.TrimBlocks = true
	c.LeftStripBlocks = true
	return c
}

// recoverTemplate turns a panic of the template engine, which some
// templates and inputs provoke (a division by zero), into an error.
func recoverTemplate(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrTemplate, p)
	}
}

// NewTemplate compiles the chat template of c.
func NewTemplate(c Config) (_ *Template, err error) {
	defer recoverTemplate(&err)
	if c.ChatTemplate == "" {
		return nil, fmt.Errorf("%w: empty", ErrTemplate)
	}
	const name = "chat_template"
	loader, err := loaders.NewShiftedLoader(name, strings.NewReader(c.ChatTemplate), nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	tpl, err := exec.NewTemplate(name, templateConfig(), loader, env)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	t := &Template{tpl: tpl, cfg: c}
	if sum := sha256.Sum256([]byte(c.ChatTemplate)); hex.EncodeToString(sum[:]) == qwen3Template {
		t.native = renderQwen3
	}
	return t, nil
}

// Render renders msgs for the engine. tools is the raw JSON of the
// request's tools array (nil or empty for none); addGenerationPrompt asks
// for the start of the assistant's reply, as a chat completion does. Each
// tool call's arguments, a JSON object as a string, reach the template
// decoded, as OpenAI-compatible engines hand them over; arguments that are
// not JSON stay a string.
func (t *Template) Render(msgs []prompt.Message, tools []byte, addGenerationPrompt bool) (string, error) {
	out, err := t.AppendRender(nil, msgs, tools, addGenerationPrompt)
	return unsafeString(out), err
}

// AppendRender is Render appending to dst, so a caller that holds the
// text only while it encodes it can render into a buffer it reuses.
func (t *Template) AppendRender(dst []byte, msgs []prompt.Message, tools []byte, addGenerationPrompt bool) ([]byte, error) {
	if t.native != nil {
		out, ok, err := t.native(dst, msgs, tools, addGenerationPrompt)
		if err != nil {
			return dst, fmt.Errorf("%w: tools: %v", ErrTemplate, err)
		}
		if ok {
			return out, nil
		}
	}
	out, err := t.renderJinja(msgs, tools, addGenerationPrompt)
	return append(dst, out...), err
}

// renderJinja is Render by the Jinja engine.
func (t *Template) renderJinja(msgs []prompt.Message, tools []byte, addGenerationPrompt bool) (out string, err error) {
	r := renderState{}
	defer r.release()
	defer recoverTemplate(&err)
	vars := map[string]any{
		"messages":              r.messages(msgs),
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.cfg.BOSToken,
		"eos_token":             t.cfg.EOSToken,
	}
	if len(bytes.TrimSpace(tools)) > 0 {
		v, err := r.decode(tools)
		if err != nil {
			return "", fmt.Errorf("%w: tools: %v", ErrTemplate, err)
		}
		if v != nil {
			vars["tools"] = v
		}
	}
	out, err = t.tpl.ExecuteToString(exec.NewContext(vars))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrTemplate, err)
	}
	return out, nil
}

// RenderPrompt renders p: its messages, tools and the generation prompt.
// A prompt without messages (a completion) is its text as is.
func (t *Template) RenderPrompt(p *prompt.Prompt) (string, error) {
	if p.Messages == nil {
		return p.Text, nil
	}
	return t.Render(p.Messages, p.Tools, true)
}

// keyOrder remembers the key order of the JSON objects being rendered, by
// the address of the map each was decoded into, for tojson: Go maps have
// no order, and Python's dicts keep the order of the request.
var keyOrder sync.Map // unsafe.Pointer → []string

// renderState owns the objects one Render decoded. With local set, their
// key order stays in order, for a jsonWriter given it, rather than in
// keyOrder, which only a Jinja filter needs.
type renderState struct {
	maps  []unsafe.Pointer
	local bool
	order map[unsafe.Pointer][]string
}

func (r *renderState) release() {
	for _, p := range r.maps {
		keyOrder.Delete(p)
	}
}

func (r *renderState) messages(msgs []prompt.Message) list {
	out := make(list, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		v := map[string]any{"role": m.Role, "content": m.Content}
		order := []string{"role", "content"}
		if len(m.ToolCalls) > 0 {
			calls := make(list, len(m.ToolCalls))
			for k, tc := range m.ToolCalls {
				var args any = tc.Arguments
				if a, err := r.decode([]byte(tc.Arguments)); err == nil && a != nil {
					args = a
				}
				fn := r.object(map[string]any{"name": tc.Name, "arguments": args}, []string{"name", "arguments"})
				calls[k] = r.object(map[string]any{"type": "function", "function": fn}, []string{"type", "function"})
			}
			v["tool_calls"] = calls
			order = append(order, "tool_calls")
		}
		out[i] = r.object(v, order)
	}
	return out
}

func (r *renderState) object(m map[string]any, keys []string) map[string]any {
	p := reflect.ValueOf(m).UnsafePointer()
	if r.local {
		if r.order == nil {
			r.order = make(map[unsafe.Pointer][]string)
		}
		r.order[p] = keys
		return m
	}
	keyOrder.Store(p, keys)
	r.maps = append(r.maps, p)
	return m
}

// decode reads JSON into the values templates see: objects as maps whose
// key order tojson knows, arrays as slices, integers as int64 and other
// numbers as float64, as Python's json module reads them.
func (r *renderState) decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := r.value(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func (r *renderState) value(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok := tok.(type) {
	case json.Delim:
		switch tok {
		case '[':
			arr := list{}
			for dec.More() {
				v, err := r.value(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		case '{':
			m := map[string]any{}
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := r.value(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := m[k]; !dup {
					keys = append(keys, k)
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return r.object(m, keys), nil
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(tok), 10, 64); err == nil {
			return i, nil
		}
		f, err := tok.Float64()
		if err != nil && !math.IsInf(f, 0) {
			return nil, err
		}
		return f, nil
	}
	return tok, nil // string, bool or nil
}

// filterToJSON is jinja's tojson as transformers defines it:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys).
func filterToJSON(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var (
		indent, separators *exec.Value
		sortKeys           bool
	)
	if err := params.Take(
		exec.KeywordArgument("indent", exec.AsValue(nil), func(v *exec.Value) error { indent = v; return nil }),
		exec.KeywordArgument("ensure_ascii", exec.AsValue(false), func(*exec.Value) error { return nil }),
		exec.KeywordArgument("separators", exec.AsValue(nil), func(v *exec.Value) error { separators = v; return nil }),
		exec.KeywordArgument("sort_keys", exec.AsValue(false), exec.BoolArgument(&sortKeys)),
	); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	w := jsonWriter{item: ", ", key: ": ", sortKeys: sortKeys}
	if !indent.IsNil() {
		if !indent.IsInteger() {
			return exec.AsValue(exec.ErrInvalidCall(errors.New("indent must be an integer")))
		}
		w.indent = strings.Repeat(" ", indent.Integer())
		w.item = ","
	}
	if !separators.IsNil() {
		if !separators.IsList() || separators.Len() != 2 {
			return exec.AsValue(exec.ErrInvalidCall(errors.New("separators must be a pair")))
		}
		a, _ := separators.GetItem(0)
		b, _ := separators.GetItem(1)
		w.item, w.key = a.String(), b.String()
	}
	if err := w.writeAny(in.Interface()); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	return exec.AsSafeValue(w.b.String())
}

// jsonWriter writes values in Python's json.dumps format.
type jsonWriter struct {
	b         strings.Builder
	item, key string
	indent    string
	sortKeys  bool
	order     map[unsafe.Pointer][]string // key orders besides keyOrder's
}

func (w *jsonWriter) writeAny(v any) error { return w.write(reflect.ValueOf(v), 0) }

func (w *jsonWriter) newline(depth int) {
	if w.indent == "" {
		return
	}
	w.b.WriteByte('\n')
	for range depth {
		w.b.WriteString(w.indent)
	}
}

func (w *jsonWriter) write(v reflect.Value, depth int) error {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			w.b.WriteString("null")
			return nil
		}
		v = v.Elem()
	}
	if ev, ok := v.Interface().(*exec.Value); ok {
		return w.write(ev.Val, depth)
	}
	switch v.Kind() {
	case reflect.Invalid:
		w.b.WriteString("null")
	case reflect.Bool:
		w.b.WriteString(map[bool]string{true: "true", false: "false"}[v.Bool()])
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		w.b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		w.b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		w.b.WriteString(pyFloat(v.Float()))
	case reflect.String:
		writePyString(&w.b, v.String())
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			w.b.WriteString("[]")
			return nil
		}
		w.b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				w.b.WriteString(w.item)
			}
			w.newline(depth + 1)
			if err := w.write(v.Index(i), depth+1); err != nil {
				return err
			}
		}
		w.newline(depth)
		w.b.WriteByte(']')
	case reflect.Map:
		if v.Len() == 0 {
			w.b.WriteString("{}")
			return nil
		}
		keys := w.keys(v)
		w.b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				w.b.WriteString(w.item)
			}
			w.newline(depth + 1)
			writePyString(&w.b, k)
			w.b.WriteString(w.key)
			if err := w.write(v.MapIndex(reflect.ValueOf(k)), depth+1); err != nil {
				return err
			}
		}
		w.newline(depth)
		w.b.WriteByte('}')
	default:
		return fmt.Errorf("cannot write %s as JSON", v.Type())
	}
	return nil
}

// keys is the order a map's keys are written in: the request's order
// when known, else sorted.
func (w *jsonWriter) keys(v reflect.Value) []string {
	var keys []string
	if o, ok := w.order[v.UnsafePointer()]; ok {
		keys = o
	} else if o, ok := keyOrder.Load(v.UnsafePointer()); ok {
		keys = o.([]string)
	} else {
		for _, k := range v.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
	}
	if w.sortKeys {
		keys = slices.Clone(keys)
		slices.Sort(keys)
	}
	return keys
}

// pyFloat is Python's repr of a float.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// writePyString writes s as json.dumps with ensure_ascii=False does.
func writePyString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
		i++
	}
	b.WriteByte('"')
}

func raiseException(msg string) (string, error) {
	return "", fmt.Errorf("%w: %s", ErrTemplate, msg)
}

// strftime formats t with the C directives chat templates use for dates.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
