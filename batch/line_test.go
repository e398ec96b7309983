package batch

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestParseLine(t *testing.T) {
	const ep = EndpointChatCompletions
	cases := []struct {
		name, line, code, param string
	}{
		{"ok", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`, "", ""},
		{"not json", `{"custom_id":`, "invalid_json_line", ""},
		{"two values", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}} {}`, "invalid_json_line", ""},
		{"no custom_id", `{"method":"POST","url":"/v1/chat/completions","body":{}}`, "missing_required_parameter", "custom_id"},
		{"empty custom_id", `{"custom_id":"","method":"POST","url":"/v1/chat/completions","body":{}}`, "missing_required_parameter", "custom_id"},
		{"long custom_id", `{"custom_id":"` + strings.Repeat("x", MaxCustomIDLength+1) + `","method":"POST","url":"/v1/chat/completions","body":{}}`, "invalid_value", "custom_id"},
		{"GET", `{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{}}`, "invalid_method", "method"},
		{"no url", `{"custom_id":"a","method":"POST","body":{}}`, "missing_required_parameter", "url"},
		{"other url", `{"custom_id":"a","method":"POST","url":"/v1/completions","body":{}}`, "mismatched_endpoint", "url"},
		{"body array", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":[]}`, "invalid_value", "body"},
		{"no body", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions"}`, "invalid_value", "body"},
		{"not utf-8", "{\"custom_id\":\"\xff\",\"method\":\"POST\"}", "invalid_json_line", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := ParseLine([]byte(c.line), 7, ep)
			if c.code == "" {
				if err != nil || l.CustomID != "a" || string(l.Body) != `{"model":"m"}` {
					t.Fatalf("%+v, %v", l, err)
				}
				return
			}
			le, ok := err.(*LineError)
			if !ok || le.Code != c.code || le.Param != c.param || le.Line != 7 || le.Message == "" {
				t.Fatalf("err = %#v, want code %s param %s on line 7", err, c.code, c.param)
			}
		})
	}
}

func TestParseFileCountsBlankLinesAndLimits(t *testing.T) {
	ok := `{"custom_id":"%s","method":"POST","url":"/v1/chat/completions","body":{}}`
	content := strings.ReplaceAll(ok, "%s", "a") + "\r\n\n  \n" + strings.ReplaceAll(ok, "%s", "b") + "\n"
	lines, errs := parseFile([]byte(content), EndpointChatCompletions, 10, 10)
	if errs != nil || len(lines) != 2 || lines[1].CustomID != "b" {
		t.Fatalf("%v %v", lines, errs)
	}
	if _, errs := parseFile([]byte(content), EndpointChatCompletions, 1, 10); len(errs) != 1 || errs[0].Code != "too_many_requests" {
		t.Fatalf("limit: %v", errs)
	}
	if _, errs := parseFile([]byte("\n\n"), EndpointChatCompletions, 1, 10); len(errs) != 1 || errs[0].Code != "empty_file" {
		t.Fatalf("empty: %v", errs)
	}
	bad := strings.Repeat("x\n", 50)
	if _, errs := parseFile([]byte(bad), EndpointChatCompletions, 100, 5); len(errs) != 5 || errs[4].Line != 5 {
		t.Fatalf("error cap: %v", errs)
	}
}

// FuzzParseLine: no line makes the parser panic; a line it accepts keeps
// its promises (a custom_id, POST, the endpoint, an object body) and
// reads the same once written back.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[]}}`))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{} }`))
	f.Add([]byte(`{"custom_id":null,"method":"POST"}`))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte("{\"custom_id\":\"\\u0000\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"a\":1}}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := ParseLine(raw, 1, EndpointChatCompletions)
		if err != nil {
			if _, ok := err.(*LineError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if l.CustomID == "" || len(l.CustomID) > MaxCustomIDLength || l.Method != "POST" || l.URL != EndpointChatCompletions || len(l.Body) == 0 || l.Body[0] != '{' || !json.Valid(l.Body) {
			t.Fatalf("accepted %q as %+v", raw, l)
		}
		again, _ := json.Marshal(map[string]any{"custom_id": l.CustomID, "method": l.Method, "url": l.URL, "body": l.Body})
		l2, err := ParseLine(again, 1, EndpointChatCompletions)
		if err != nil || l2.CustomID != l.CustomID {
			t.Fatalf("written back %s: %+v, %v", again, l2, err)
		}
	})
}

// BenchmarkParseFile: validating a 1,000-request input file.
func BenchmarkParseFile(b *testing.B) {
	var sb strings.Builder
	for i := range 1000 {
		sb.WriteString(`{"custom_id":"req-` + strings.Repeat("0", 3) + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + `-` + strconv.Itoa(i) + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":64,"messages":[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"Summarise the attached report in three sentences."}]}}` + "\n")
	}
	content := []byte(sb.String())
	b.SetBytes(int64(len(content)))
	b.ReportAllocs()
	for b.Loop() {
		if _, errs := parseFile(content, EndpointChatCompletions, DefaultMaxRequests, 10); errs != nil {
			b.Fatal(errs[0])
		}
	}
}

// FuzzParseEntry: no stream entry makes the intake's reader panic; an
// entry it accepts is a request with an id, a tenant and a valid line.
func FuzzParseEntry(f *testing.F) {
	f.Add("r1", "acme", "standard", "2026-12-01T15:00:00Z", "/v1/chat/completions", `{"model":"m","messages":[]}`)
	f.Add("", "", "", "", "", "")
	f.Add("r2", "", "interactive", "17", "/v1/completions", `{"model":"m","prompt":"x"}`)
	f.Add("r3", "", "", "soon", "", `[]`)
	f.Fuzz(func(t *testing.T, id, tenant, priority, deadline, endpoint, body string) {
		r, err := parseEntry(map[string]any{"id": id, "tenant": tenant, "priority": priority, "deadline": deadline, "endpoint": endpoint, "body": body})
		if r == nil {
			t.Fatal("nil request")
		}
		if err != nil {
			return
		}
		if r.id == "" || r.tenant == "" || r.line == nil || r.line.CustomID != id || !json.Valid(r.line.Body) || (r.band != "" && r.band != "standard") {
			t.Fatalf("accepted %+v", r)
		}
	})
}
