package jsonscan

import (
	"bytes"
	"encoding/json"
	"maps"
	"testing"
	"unicode/utf8"
)

func TestEdit(t *testing.T) {
	for _, tc := range []struct {
		obj  string
		set  []Member
		drop []string
		want string
	}{
		{`{}`, []Member{{Key: "priority", Value: []byte("1")}}, nil, `{"priority":1}`},
		{` { } `, []Member{{Key: "a", Value: []byte("1")}}, nil, ` { "a":1} `},
		{`{"model":"m","messages":[1, 2]}`, []Member{{Key: "priority", Value: []byte("0")}}, nil, `{"model":"m","messages":[1, 2],"priority":0}`},
		{`{"priority":5,"model":"m","priority":7}`, []Member{{Key: "priority", Value: []byte("2")}}, nil, `{"priority":2,"model":"m"}`},
		{`{"stream":true, "stream_options":{"x":1},"max_tokens":9}`, []Member{{Key: "stream", Value: []byte("false")}, {Key: "max_tokens", Value: []byte("1")}}, []string{"stream_options"},
			`{"stream":false,"max_tokens":1}`},
		{`{"a":1}`, nil, []string{"a"}, `{}`},
		{`{"a":1}`, []Member{{Key: "b", Value: []byte("2"), Replace: true}, {Key: "a", Value: []byte("3"), Replace: true}}, nil, `{"a":3}`},
		{"{\n  \"a\": {\"b\": [1]}\n}\n", []Member{{Key: "c", Value: []byte("null")}}, nil, "{\n  \"a\": {\"b\": [1]},\"c\":null}\n"},
	} {
		got, err := Edit([]byte(tc.obj), tc.set, tc.drop...)
		if err != nil || string(got) != tc.want {
			t.Errorf("Edit(%s, %v, %v) = %s, %v; want %s", tc.obj, tc.set, tc.drop, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"a":}`, `{"a":1} x`, `"s"`} {
		if _, err := Edit([]byte(bad), []Member{{Key: "a", Value: []byte("1")}}); err == nil {
			t.Errorf("Edit(%q) took it", bad)
		}
	}
}

// FuzzEdit: an edited object reads as the object with the members set and
// dropped, whatever else it holds; Lookup reads a member as a decoder does.
func FuzzEdit(f *testing.F) {
	f.Add([]byte(`{"model":"m","priority":3,"messages":[{"role":"user","content":"hi"}]}`), "priority", []byte(`1`), "stream_options")
	f.Add([]byte(`{"a":1,"a":2,"\u0062":{"c":[]}}`), "b", []byte(`"x"`), "a")
	f.Add([]byte(`{ }`), "k", []byte(`[1,{"z":null}]`), "")
	f.Fuzz(func(t *testing.T, obj []byte, key string, value []byte, drop string) {
		var want map[string]json.RawMessage
		// (Keys that are not UTF-8 are kept as they are here, where
		// encoding/json makes U+FFFD of them.)
		if !utf8.Valid(obj) || json.Unmarshal(obj, &want) != nil || want == nil || !json.Valid(value) || !plainKey(key) {
			return
		}
		raw, ok, err := Lookup(obj, drop)
		if err != nil {
			t.Fatalf("Lookup of a valid object: %v", err)
		}
		if w, has := want[drop]; has != ok || (ok && !bytes.Equal(bytes.TrimSpace(raw), bytes.TrimSpace(w))) {
			t.Fatalf("Lookup(%q) = %s, %v; want %s, %v", drop, raw, ok, w, has)
		}
		got, err := Edit(obj, []Member{{Key: key, Value: value}}, drop)
		if err != nil {
			t.Fatalf("Edit of a valid object: %v", err)
		}
		want[key] = value
		delete(want, drop)
		var back map[string]json.RawMessage
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("edited %s into %s: %v", obj, got, err)
		}
		if !maps.EqualFunc(back, want, func(a, b json.RawMessage) bool { return bytes.Equal(compact(a), compact(b)) }) {
			t.Fatalf("edited %s into %s", obj, got)
		}
	})
}

func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			return false
		}
	}
	return true
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}
