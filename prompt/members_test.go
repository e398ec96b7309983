package prompt

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
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(data, &want) != nil || want == nil
		last := map[string][]byte{}
		err := Members(data, func(key, value []byte) error {
			// Bytes of a key that are not UTF-8 are handed out as
			// they are; encoding/json replaces each with U+FFFD.
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
	})
}
