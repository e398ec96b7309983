package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzMembers: Members accepts exactly the JSON objects encoding/json
// accepts, and hands out each member's key and value as encoding/json
// reads them.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1,"b":[true,null,"x\u00e9"]} `, `{"a":}`, `[1]`, `null`, `{"a":1}x`, `{"k\"q":{"n":{}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkMembers)
}

// checkMembers reads data with Members and fails on any difference from
// encoding/json: in whether it is refused, or in the members it reads.
func checkMembers(t *testing.T, data []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	wantErr := json.Unmarshal(data, &want) != nil || want == nil
	last := map[string][]byte{}
	err := Members(data, func(key, value []byte) error {
		// Bytes of a key that are not UTF-8 are handed out as they are;
		// encoding/json replaces each with U+FFFD.
		last[string([]rune(string(key)))] = bytes.Clone(value)
		return nil
	})
	if (err != nil) != wantErr {
		t.Fatalf("%q: Members error %v, encoding/json error %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if len(last) != len(want) {
		t.Fatalf("%q: %d keys, encoding/json %d", data, len(last), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(last[k], v) {
			t.Fatalf("%q: key %q value %q, encoding/json %q", data, k, last[k], v)
		}
	}
}

// FuzzElements: Elements accepts exactly the JSON arrays encoding/json
// accepts, and hands out each element as encoding/json reads it.
func FuzzElements(f *testing.F) {
	for _, s := range []string{`[]`, ` [1, {"a":[2]}, "x\u00e9", null] `, `[1,]`, `{}`, `[1]x`, `"a"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want []json.RawMessage
		wantErr := json.Unmarshal(data, &want) != nil || want == nil
		var got [][]byte
		err := Elements(data, func(value []byte) error {
			got = append(got, bytes.Clone(value))
			return nil
		})
		if (err != nil) != wantErr {
			t.Fatalf("%q: Elements error %v, encoding/json error %v", data, err, wantErr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, encoding/json %d", data, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: element %d %q, encoding/json %q", data, i, got[i], want[i])
			}
		}
	})
}

// FuzzString: String decodes exactly the JSON strings encoding/json
// decodes, to the same text.
func FuzzString(f *testing.F) {
	for _, s := range []string{`""`, ` "a\"b\\c\u00e9\ud83d\ude00" `, `"\ud800"`, "\"\xff\xfe\"", `"a`, `1`, `"a"x`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkString)
}

// checkString reads data with String and fails on any difference from
// encoding/json: in whether it is refused, or in the text it decodes.
func checkString(t *testing.T, data []byte) {
	t.Helper()
	var want *string
	wantErr := json.Unmarshal(data, &want) != nil || want == nil
	got, err := String(data)
	if (err != nil) != wantErr {
		t.Fatalf("%q: String error %v, encoding/json error %v", data, err, wantErr)
	}
	if err == nil && got != *want {
		t.Fatalf("%q: String %q, encoding/json %q", data, got, *want)
	}
}
