package prompt

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestTextBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind BodyKind
		body string
		// text is the bound; -1: the body proves nothing.
		text  int
		model string
	}{
		{"chat", ChatBody, `{"model":"m","messages":[{"role":"system","content":"abc"},{"role":"user","content":"hello"}]}`, 8, "m"},
		{"chat parts", ChatBody, `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"text":"ef","type":"text"}]}],"model":"m"}`, 6, "m"},
		{"chat assistant and unknown roles count for nothing", ChatBody, `{"model":"m","messages":[{"role":"assistant","content":"abc"},{"content":"abc"},{"role":"ghost","content":"abc"},{"role":"tool","content":"xy"}]}`, 2, "m"},
		{"escapes are counted decoded", ChatBody, `{"model":"m","messages":[{"role":"user","content":"a\nb\u00e9\u20ac\ud83d\ude00\u0041"}]}`, 1 + 1 + 1 + 2 + 3 + 4 + 1, "m"},
		{"the last duplicate counts", ChatBody, `{"model":"x","messages":[{"role":"user","content":"abcdefgh"}],"messages":[{"role":"user","content":"ab","role":"assistant"}],"model":"m"}`, 0, "m"},
		{"white space", ChatBody, " {\n \"model\" : \"m\" ,\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"abc\" } ] }\n", 3, "m"},
		{"an escaped key in a message drops the message", ChatBody, `{"model":"m","messages":[{"role":"user","con\u0074ent":"abc"},{"role":"user","content":"de"}]}`, 2, "m"},
		{"an escaped top-level key proves nothing", ChatBody, `{"model":"m","mess\u0061ges":[{"role":"user","content":"abc"}]}`, -1, ""},
		{"an escaped model proves nothing", ChatBody, `{"model":"\u006d","messages":[]}`, -1, ""},
		{"no model", ChatBody, `{"messages":[{"role":"user","content":"abc"}]}`, -1, ""},
		{"model of the wrong type", ChatBody, `{"model":1,"messages":[]}`, -1, ""},
		{"not JSON", ChatBody, `{"model":"m","messages":[{"role":"user","content":"abc"}]`, -1, ""},
		{"trailing bytes", ChatBody, `{"model":"m"} x`, -1, ""},
		{"not an object", ChatBody, `["model"]`, -1, ""},
		{"wrong types count for nothing", ChatBody, `{"model":"m","messages":[{"role":"user","content":7},"x",{"role":"user","content":[1,{"type":"text","text":3}]}]}`, 0, "m"},
		{"completion", CompletionBody, `{"model":"m","prompt":"abcdef"}`, 6, "m"},
		{"completion batch: the longest", CompletionBody, `{"model":"m","prompt":["abc","abcdefg","ab"]}`, 7, "m"},
		{"completion token ids", CompletionBody, `{"model":"m","prompt":[[1,2,3],[4]]}`, 0, "m"},
		{"completion messages are not read", CompletionBody, `{"model":"m","messages":[{"role":"user","content":"abc"}]}`, 0, "m"},
		{"responses string", ResponsesBody, `{"model":"m","input":"abcde","instructions":"xy"}`, 7, "m"},
		{"responses items", ResponsesBody, `{"model":"m","input":[{"role":"user","content":"abc"},{"type":"message","role":"developer","content":[{"type":"input_text","text":"de"},{"type":"input_image","image_url":"data:"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"zzz"}]},{"type":"function_call_output","call_id":"c","output":"zzzz"},{"type":"reasoning","content":[{"type":"reasoning_text","text":"zz"}],"role":"user"}]}`, 5, "m"},
		{"responses truncation disabled", ResponsesBody, `{"model":"m","input":"abc","truncation":"disabled"}`, 3, "m"},
		{"responses truncation null", ResponsesBody, `{"model":"m","input":"abc","truncation":null}`, 3, "m"},
		{"responses truncation auto proves nothing", ResponsesBody, `{"model":"m","input":"abc","truncation":"auto"}`, -1, ""},
		{"responses truncation escaped proves nothing", ResponsesBody, `{"model":"m","input":"abc","truncation":"\u0064isabled"}`, -1, ""},
		{"responses type escaped", ResponsesBody, `{"model":"m","input":[{"type":"\u006dessage","role":"user","content":"abc"}]}`, 0, "m"},
		{"responses messages are not read", ResponsesBody, `{"model":"m","messages":[{"role":"user","content":"abc"}]}`, 0, "m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, ok := TextBound([]byte(tc.body), tc.kind)
			if tc.text < 0 {
				if ok {
					t.Fatalf("proved %+v of a body that proves nothing", b)
				}
				return
			}
			if !ok || b.Text != tc.text || b.Model != tc.model {
				t.Fatalf("got %+v, %v; want text %d, model %q", b, ok, tc.text, tc.model)
			}
		})
	}
}

// TestTextBoundAllocates proves that the pass allocates nothing.
func TestTextBoundAllocates(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(`a\"b\u00e9 `, 1000) + `"},{"role":"user","content":[{"type":"text","text":"abc"}]}],"tools":[{"type":"function"}],"stre\u0061m":true}`)
	kind := ChatBody
	if n := testing.AllocsPerRun(100, func() { TextBound(body, kind) }); n != 0 {
		t.Errorf("TextBound allocates %v times a body", n)
	}
}

// textBoundRef is TextBound's rules over encoding/json's reading of body:
// model and text, or ok false when it does not read body as an object.
func textBoundRef(body []byte, kind BodyKind) (model string, text int, ok bool) {
	var top map[string]any
	if json.Unmarshal(body, &top) != nil || top == nil {
		return "", 0, false
	}
	model, _ = top["model"].(string)
	str := func(v any) int { s, _ := v.(string); return len(s) }
	content := func(v any, partType string) int {
		parts, isList := v.([]any)
		if !isList {
			return str(v)
		}
		n := 0
		for _, p := range parts {
			if p, _ := p.(map[string]any); p != nil && p["type"] == partType {
				n += str(p["text"])
			}
		}
		return n
	}
	messages := func(v any, roles []string, partType string) int {
		n := 0
		list, _ := v.([]any)
		for _, m := range list {
			m, _ := m.(map[string]any)
			role, _ := m["role"].(string)
			typ, hasType := m["type"]
			if m == nil || !slices.Contains(roles, role) || (kind == ResponsesBody && hasType && typ != "message") {
				continue
			}
			n += content(m["content"], partType)
		}
		return n
	}
	switch kind {
	case ChatBody:
		text = messages(top["messages"], chatRoles, "text")
	case CompletionBody:
		text = str(top["prompt"])
		if list, isList := top["prompt"].([]any); isList {
			for _, p := range list {
				text = max(text, str(p))
			}
		}
	case ResponsesBody:
		text = str(top["input"]) + messages(top["input"], inputRoles, "input_text") + str(top["instructions"])
	}
	return model, text, true
}

// FuzzTextBound holds TextBound to its promise: what it proves of a body,
// encoding/json's reading of the body agrees with (the same model, at
// least as much text), and a body encoding/json refuses proves nothing.
func FuzzTextBound(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"abc"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9\ud83d\ude00"}]}]}`,
		`{"model":"m","prompt":["abc","de"]}`,
		`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]}],"instructions":"y"}`,
		`{"model":"m","input":"abc","truncation":"disabled","messages":[],"prompt":"z"}`,
		`{"model":"m","messages":[{"role":"user","content":"\xff\ud800"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range []BodyKind{ChatBody, CompletionBody, ResponsesBody} {
			b, ok := TextBound(body, kind)
			model, text, refOK := textBoundRef(body, kind)
			if !ok {
				continue
			}
			if !refOK {
				t.Fatalf("kind %d: body %q: proved %+v of a body encoding/json refuses", kind, body, b)
			}
			if b.Model != model || b.Text > text {
				t.Fatalf("kind %d: body %q: proved %+v; encoding/json reads model %q, text %d", kind, body, b, model, text)
			}
		}
	})
}

// BenchmarkTextBound reads a 30 MiB chat body of agent-like messages, the
// size the gateway scans rather than decodes: it allocates nothing.
func BenchmarkTextBound(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[`)
	msg := `{"role":"tool","tool_call_id":"call_1","content":"` + strings.Repeat(`func main() {\n\tfmt.Println(\"héllo\")\n}\n`, 100) + `"}`
	for i := 0; sb.Len() < 30<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(msg)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if bound, ok := TextBound(body, ChatBody); !ok || bound.Text == 0 {
			b.Fatal("nothing proved")
		}
	}
}
