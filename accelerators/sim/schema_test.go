package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// validate checks value v against schema s for the keywords schemaGen
// claims to honour; root is the document $refs resolve against. It is
// written from the JSON Schema specification, apart from the generator,
// so that the two do not share a misreading.
func validate(root, s, v any, depth int) error {
	if depth > 64 {
		return errors.New("schema recursion too deep to validate")
	}
	switch s := s.(type) {
	case bool:
		if !s {
			return errors.New("false schema")
		}
		return nil
	case jsonObject:
	default:
		return nil
	}
	o := s.(jsonObject)
	get := func(k string) (any, bool) { return o.get(k) }
	if ref, ok := get("$ref"); ok {
		target, err := pointer(root, ref.(string))
		if err != nil {
			return err
		}
		if err := validate(root, target, v, depth+1); err != nil {
			return fmt.Errorf("$ref %s: %w", ref, err)
		}
	}
	if all, ok := get("allOf"); ok {
		for i, b := range all.([]any) {
			if err := validate(root, b, v, depth+1); err != nil {
				return fmt.Errorf("allOf[%d]: %w", i, err)
			}
		}
	}
	if anyOf, ok := get("anyOf"); ok {
		var errs []error
		for _, b := range anyOf.([]any) {
			errs = append(errs, validate(root, b, v, depth+1))
		}
		if !slicesContainsNil(errs) {
			return fmt.Errorf("anyOf: no branch holds: %v", errs)
		}
	}
	if oneOf, ok := get("oneOf"); ok {
		n := 0
		for _, b := range oneOf.([]any) {
			if validate(root, b, v, depth+1) == nil {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("oneOf: %d branches hold", n)
		}
	}
	if c, ok := get("const"); ok && !jsonEqual(c, v) {
		return fmt.Errorf("%v is not const %v", v, c)
	}
	if e, ok := get("enum"); ok {
		found := false
		for _, x := range e.([]any) {
			found = found || jsonEqual(x, v)
		}
		if !found {
			return fmt.Errorf("%v is not in enum %v", v, e)
		}
	}
	if t, ok := get("type"); ok && !(v == nil && o.isTrue("nullable")) {
		types := []any{t}
		if l, ok := t.([]any); ok {
			types = l
		}
		okType := false
		for _, t := range types {
			okType = okType || hasType(t.(string), v)
		}
		if !okType {
			return fmt.Errorf("%s is not of type %v", show(v), t)
		}
	}
	switch v := v.(type) {
	case jsonObject:
		return validateObject(root, o, v, depth)
	case []any:
		return validateArray(root, o, v, depth)
	case string:
		return validateString(o, v)
	case json.Number:
		return validateNumber(o, v)
	}
	return nil
}

func validateObject(root any, o, v jsonObject, depth int) error {
	seen := map[string]bool{}
	for _, m := range v {
		if seen[m.key] {
			return fmt.Errorf("duplicate key %q", m.key)
		}
		seen[m.key] = true
	}
	props, _ := o.get("properties")
	properties, _ := props.(jsonObject)
	extra, hasExtra := o.get("additionalProperties")
	for _, m := range v {
		if s, ok := properties.get(m.key); ok {
			if err := validate(root, s, m.val, depth+1); err != nil {
				return fmt.Errorf(".%s: %w", m.key, err)
			}
		} else if hasExtra {
			if err := validate(root, extra, m.val, depth+1); err != nil {
				return fmt.Errorf(".%s (additional): %w", m.key, err)
			}
		}
	}
	if req, ok := o.get("required"); ok {
		for _, r := range req.([]any) {
			if !seen[r.(string)] {
				return fmt.Errorf("required %q missing", r)
			}
		}
	}
	if n, ok := intKeyword(o, "minProperties"); ok && len(v) < n {
		return fmt.Errorf("%d properties < minProperties %d", len(v), n)
	}
	if n, ok := intKeyword(o, "maxProperties"); ok && len(v) > n {
		return fmt.Errorf("%d properties > maxProperties %d", len(v), n)
	}
	return nil
}

func validateArray(root any, o jsonObject, v []any, depth int) error {
	var prefix []any
	items, _ := o.get("items")
	if p, ok := o.get("prefixItems"); ok {
		prefix = p.([]any)
	}
	if l, ok := items.([]any); ok {
		prefix = l
		items, _ = o.get("additionalItems")
	}
	for i, x := range v {
		s := items
		if i < len(prefix) {
			s = prefix[i]
		}
		if s == nil {
			continue
		}
		if err := validate(root, s, x, depth+1); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	if n, ok := intKeyword(o, "minItems"); ok && len(v) < n {
		return fmt.Errorf("%d items < minItems %d", len(v), n)
	}
	if n, ok := intKeyword(o, "maxItems"); ok && len(v) > n {
		return fmt.Errorf("%d items > maxItems %d", len(v), n)
	}
	if o.isTrue("uniqueItems") {
		for i := range v {
			for j := range i {
				if jsonEqual(v[i], v[j]) {
					return fmt.Errorf("items %d and %d are equal", j, i)
				}
			}
		}
	}
	return nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func validateString(o jsonObject, v string) error {
	n := utf8.RuneCountInString(v)
	if m, ok := intKeyword(o, "minLength"); ok && n < m {
		return fmt.Errorf("%q shorter than minLength %d", v, m)
	}
	if m, ok := intKeyword(o, "maxLength"); ok && n > m {
		return fmt.Errorf("%q longer than maxLength %d", v, m)
	}
	f, _ := o.get("format")
	var err error
	switch f {
	case "date-time":
		_, err = time.Parse(time.RFC3339, v)
	case "date":
		_, err = time.Parse(time.DateOnly, v)
	case "email":
		if at := strings.IndexByte(v, '@'); at < 1 || at == len(v)-1 {
			err = errors.New("no user@domain")
		}
	case "uri":
		var u *url.URL
		if u, err = url.Parse(v); err == nil && u.Scheme == "" {
			err = errors.New("no scheme")
		}
	case "uuid":
		if !uuidRE.MatchString(v) {
			err = errors.New("not a uuid")
		}
	}
	if err != nil {
		return fmt.Errorf("%q is not a %s: %w", v, f, err)
	}
	return nil
}

func validateNumber(o jsonObject, n json.Number) error {
	v, err := n.Float64()
	if err != nil {
		return err
	}
	if m, ok := numKeyword(o, "minimum"); ok && (v < m || o.isTrue("exclusiveMinimum") && v == m) {
		return fmt.Errorf("%v below minimum %v", v, m)
	}
	if m, ok := numKeyword(o, "maximum"); ok && (v > m || o.isTrue("exclusiveMaximum") && v == m) {
		return fmt.Errorf("%v above maximum %v", v, m)
	}
	if m, ok := numKeyword(o, "exclusiveMinimum"); ok && v <= m {
		return fmt.Errorf("%v not above exclusiveMinimum %v", v, m)
	}
	if m, ok := numKeyword(o, "exclusiveMaximum"); ok && v >= m {
		return fmt.Errorf("%v not below exclusiveMaximum %v", v, m)
	}
	if m, ok := numKeyword(o, "multipleOf"); ok {
		if q := v / m; math.Abs(q-math.Round(q)) > 1e-9 {
			return fmt.Errorf("%v is not a multiple of %v", v, m)
		}
	}
	return nil
}

func hasType(t string, v any) bool {
	switch v := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case []any:
		return t == "array"
	case jsonObject:
		return t == "object"
	case json.Number:
		if t == "number" {
			return true
		}
		// An integer is written without a fraction or exponent, so
		// clients that read it into an integer type accept it.
		_, err := strconv.ParseInt(string(v), 10, 64)
		return t == "integer" && err == nil
	}
	return false
}

func pointer(root any, ref string) (any, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("ref %q is not local", ref)
	}
	cur := root
	if frag == "" {
		return cur, nil
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		o, ok := cur.(jsonObject)
		if !ok {
			return nil, fmt.Errorf("ref %q: %q is not in an object", ref, tok)
		}
		if cur, ok = o.get(tok); !ok {
			return nil, fmt.Errorf("ref %q: no %q", ref, tok)
		}
	}
	return cur, nil
}

func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			return false
		}
		x, _ := a.Float64()
		y, _ := bn.Float64()
		return x == y
	case []any:
		bl, ok := b.([]any)
		if !ok || len(a) != len(bl) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], bl[i]) {
				return false
			}
		}
		return true
	case jsonObject:
		bo, ok := b.(jsonObject)
		if !ok || len(a) != len(bo) {
			return false
		}
		for _, m := range a {
			if x, ok := bo.get(m.key); !ok || !jsonEqual(m.val, x) {
				return false
			}
		}
		return true
	}
	return a == b
}

func slicesContainsNil(errs []error) bool {
	for _, e := range errs {
		if e == nil {
			return true
		}
	}
	return false
}

func show(v any) string { return string(appendJSONValue(nil, v)) }

// schemaCases are schemas as clients send them: OpenAI strict mode, the
// Agents SDK's (Zod) and Pydantic's output, tool parameters, and each
// keyword the generator reads.
var schemaCases = []struct{ name, schema string }{
	{"strict object", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"score":{"type":"number"},"ok":{"type":"boolean"}},"required":["name","age","score","ok"],"additionalProperties":false}`},
	{"some optional", `{"type":"object","properties":{"id":{"type":"integer"},"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"boolean"},"d":{"type":"number"}},"required":["id"]}`},
	{"nothing required", `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]}}}`},
	{"integer bounds", `{"type":"object","properties":{"a":{"type":"integer","minimum":10,"maximum":12},"b":{"type":"integer","minimum":1000},"c":{"type":"integer","maximum":-5},"d":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":2},"e":{"type":"integer","minimum":3,"exclusiveMinimum":true,"maximum":5,"exclusiveMaximum":true},"f":{"type":"integer","multipleOf":7,"minimum":50},"g":{"type":"integer","minimum":1.5,"maximum":2.5}},"required":["a","b","c","d","e","f","g"]}`},
	{"number bounds", `{"type":"object","properties":{"p":{"type":"number","minimum":0,"maximum":1},"q":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":0.3},"r":{"type":"number","multipleOf":0.25,"minimum":1,"maximum":2},"s":{"type":"number"},"t":{"type":"number","minimum":-1e400},"u":{"type":"number","minimum":0.11,"maximum":0.12}},"required":["p","q","r","s","t","u"]}`},
	{"enums and const", `{"type":"object","properties":{"kind":{"type":"string","enum":["cat","dog","émeu"]},"n":{"enum":[1,2.5,null,"x",{"a":[1]}]},"v":{"const":"v1"},"o":{"const":{"nested":[true,null]}}},"required":["kind","n","v","o"]}`},
	{"arrays", `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},"minItems":2,"maxItems":4},"none":{"type":"array","items":{"type":"integer"},"maxItems":0},"many":{"type":"array","items":{"type":"boolean"},"minItems":5},"uniq":{"type":"array","items":{"enum":["a","b","c"]},"minItems":3,"uniqueItems":true},"grid":{"type":"array","items":{"type":"array","items":{"type":"integer","minimum":0,"maximum":9}}}},"required":["tags","none","many","uniq","grid"]}`},
	{"tuples", `{"type":"object","properties":{"point":{"type":"array","prefixItems":[{"type":"number"},{"type":"number"}],"items":false},"old":{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}},"required":["point","old"]}`},
	{"nested objects", `{"type":"object","properties":{"user":{"type":"object","properties":{"address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":5}},"required":["street","zip"],"additionalProperties":false}},"required":["address"]},"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku","qty"]}}},"required":["user","items"]}`},
	{"defs ref", `{"$defs":{"Step":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},"required":["explanation","output"],"additionalProperties":false}},"type":"object","properties":{"steps":{"type":"array","items":{"$ref":"#/$defs/Step"}},"final_answer":{"type":"string"}},"required":["steps","final_answer"],"additionalProperties":false}`},
	{"definitions ref", `{"definitions":{"Color":{"type":"string","enum":["red","green"]}},"type":"object","properties":{"fg":{"$ref":"#/definitions/Color"},"bg":{"$ref":"#/definitions/Color"}},"required":["fg","bg"]}`},
	{"recursive tree", `{"$ref":"#/$defs/Node","$defs":{"Node":{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["name"]}}}`},
	{"root recursion", `{"type":"object","properties":{"value":{"type":"integer"},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["value","next"]}`},
	{"nullable", `{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"anyOf":[{"type":"integer"},{"type":"null"}]},"c":{"anyOf":[{"type":"null"},{"type":"boolean"}]},"d":{"type":"string","nullable":true},"e":{"type":"null"}},"required":["a","b","c","d","e"]}`},
	{"oneOf first branch", `{"type":"object","properties":{"shape":{"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},{"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]}},"required":["shape"]}`},
	{"allOf merged", `{"allOf":[{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]},{"properties":{"b":{"type":"integer","minimum":5}},"required":["b"]}]}`},
	{"ref with siblings", `{"$defs":{"Id":{"type":"integer","minimum":100}},"type":"object","properties":{"id":{"$ref":"#/$defs/Id","description":"the id"}},"required":["id"]}`},
	{"formats", `{"type":"object","properties":{"at":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},"mail":{"type":"string","format":"email"},"link":{"type":"string","format":"uri"},"id":{"type":"string","format":"uuid"}},"required":["at","day","mail","link","id"]}`},
	{"string lengths", `{"type":"object","properties":{"long":{"type":"string","minLength":40},"short":{"type":"string","maxLength":3},"exact":{"type":"string","minLength":8,"maxLength":8}},"required":["long","short","exact"]}`},
	{"properties counts", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["a"],"minProperties":2,"maxProperties":2}`},
	{"additional properties", `{"type":"object","minProperties":3,"additionalProperties":{"type":"integer"}}`},
	{"required without properties", `{"type":"object","required":["x","y"]}`},
	{"untyped keywords", `{"properties":{"n":{"minimum":5,"maximum":6},"s":{"maxLength":2},"l":{"items":{"type":"integer"}}},"required":["n","s","l"]}`},
	{"top-level array", `{"type":"array","items":{"type":"integer"},"minItems":1}`},
	{"top-level string", `{"type":"string","enum":["yes","no"]}`},
	{"true schema", `true`},
	{"empty schema", `{}`},
	{"zod (agents sdk)", `{"type":"object","properties":{"city":{"type":"string"},"forecast":{"type":"array","items":{"type":"object","properties":{"day":{"type":"string"},"high":{"type":"number"},"conditions":{"type":"string","enum":["sunny","rain","snow"]}},"required":["day","high","conditions"],"additionalProperties":false}},"note":{"type":["string","null"]}},"required":["city","forecast","note"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`},
	{"pydantic", `{"$defs":{"Status":{"enum":["open","closed"],"title":"Status","type":"string"},"Owner":{"properties":{"login":{"title":"Login","type":"string"},"id":{"title":"Id","type":"integer"}},"required":["login","id"],"title":"Owner","type":"object"}},"properties":{"title":{"title":"Title","type":"string"},"status":{"$ref":"#/$defs/Status"},"owner":{"anyOf":[{"$ref":"#/$defs/Owner"},{"type":"null"}],"default":null},"labels":{"items":{"type":"string"},"title":"Labels","type":"array"},"priority":{"default":3,"maximum":5,"minimum":1,"title":"Priority","type":"integer"}},"required":["title","status"],"title":"Issue","type":"object"}`},
	{"codex exec_command", `{"type":"object","properties":{"cmd":{"type":"string","description":"Shell command to execute."},"workdir":{"type":"string"},"yield_time_ms":{"type":"number","description":"How long to wait (in milliseconds) for output before yielding."},"max_output_tokens":{"type":"number"},"with_escalated_permissions":{"type":"boolean"}},"required":["cmd"],"additionalProperties":false}`},
}

func TestSchemaValues(t *testing.T) {
	for _, tt := range schemaCases {
		t.Run(tt.name, func(t *testing.T) {
			schema, err := decodeSchema([]byte(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			for seed := range uint64(40) {
				out := generate(schema, seed)
				if !json.Valid(out) {
					t.Fatalf("seed %d: invalid JSON %s", seed, out)
				}
				for _, c := range out {
					if c >= utf8.RuneSelf {
						t.Fatalf("seed %d: not ASCII: %s", seed, out)
					}
				}
				v, err := decodeSchema(out)
				if err != nil {
					t.Fatal(err)
				}
				if err := validate(schema, schema, v, 0); err != nil {
					t.Fatalf("seed %d: %s\ndoes not satisfy the schema: %v", seed, out, err)
				}
				if again := generate(schema, seed); !bytes.Equal(again, out) {
					t.Fatalf("seed %d: %s, then %s", seed, out, again)
				}
			}
		})
	}
}

func generate(schema any, seed uint64) []byte {
	r := rng(seed)
	g := schemaGen{r: &r, root: schema}
	g.value(schema, 0)
	return g.b
}

// TestSchemaValueChoices: the values vary with the seed the way a model's
// would, and numbers are written as clients read them.
func TestSchemaValueChoices(t *testing.T) {
	schema, _ := decodeSchema([]byte(`{"type":"object","properties":{"id":{"type":"integer"},"a":{"type":"string"},"b":{"type":"string"},"n":{"type":"number"},"p":{"type":"number","minimum":0,"maximum":1}},"required":["id","n","p"]}`))
	withA, withoutA, fractions := 0, 0, 0
	for seed := range uint64(200) {
		v, _ := decodeSchema(generate(schema, seed))
		o := v.(jsonObject)
		if _, ok := o.get("a"); ok {
			withA++
		} else {
			withoutA++
		}
		n, _ := o.get("n")
		if strings.ContainsAny(string(n.(json.Number)), ".eE") {
			t.Errorf("an unbounded number is %s: clients that read it into an integer fail", n)
		}
		if p, _ := o.get("p"); strings.Contains(string(p.(json.Number)), ".") {
			fractions++
		}
		if o[0].key != "id" {
			t.Errorf("properties out of declared order: %s", show(v))
		}
	}
	if withA == 0 || withoutA == 0 {
		t.Errorf("optional property given %d times in 200, left out %d: want some of each", withA, withoutA)
	}
	if fractions == 0 {
		t.Errorf("a number in [0, 1] was never fractional")
	}
}

func TestToolArguments(t *testing.T) {
	tests := []struct{ name, schema, want string }{
		{"no schema", ``, `{}`},
		{"null", `null`, `{}`},
		{"unreadable", `{"type":`, `{}`},
		{"no properties", `{"type":"object"}`, `{}`},
		{"not an object", `{"type":"string"}`, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rng(1)
			if got := toolArguments(&r, json.RawMessage(tt.schema)); got != tt.want {
				t.Errorf("toolArguments(%s) = %s, want %s", tt.schema, got, tt.want)
			}
		})
	}
	for _, tt := range schemaCases {
		schema, _ := decodeSchema([]byte(tt.schema))
		if o, _ := schema.(jsonObject); (&schemaGen{}).schemaType(o) != "object" {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(20) {
				r := rng(seed)
				args := toolArguments(&r, json.RawMessage(tt.schema))
				v, err := decodeSchema([]byte(args))
				if err != nil {
					t.Fatalf("arguments %s: %v", args, err)
				}
				if err := validate(schema, schema, v, 0); err != nil {
					t.Fatalf("arguments %s do not satisfy the schema: %v", args, err)
				}
			}
		})
	}
}

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\`, "nl\n\t\r\x00\x1f", "émeu 🦤", "\xff\xfe", "\u2028"} {
		b := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q wrote %s: %v", s, b, err)
		}
		var want string
		m, _ := json.Marshal(s)
		json.Unmarshal(m, &want)
		if back != want {
			t.Errorf("%q wrote %s, read back %q", s, b, back)
		}
		for _, c := range b {
			if c >= utf8.RuneSelf {
				t.Errorf("%q wrote non-ASCII %s", s, b)
			}
		}
	}
}

func FuzzSchemaValue(f *testing.F) {
	for _, tt := range schemaCases {
		f.Add([]byte(tt.schema), uint64(1))
	}
	f.Add([]byte(`{"$ref":"#"}`), uint64(2))
	f.Add([]byte(`{"allOf":[{"$ref":"#"},{"$ref":"#"}]}`), uint64(3))
	f.Add([]byte(`{"type":"array","minItems":1e9,"items":{"type":"array","minItems":64,"items":{"$ref":"#"}}}`), uint64(4))
	f.Add([]byte(`{"type":"object","properties":{"a":{"$ref":"#"},"b":{"$ref":"#"}},"required":["a","b"]}`), uint64(5))
	f.Add([]byte(`{"type":"number","multipleOf":1e-300,"minimum":-1e308,"maximum":1e308}`), uint64(6))
	f.Add([]byte(`{"type":"integer","minimum":1e300}`), uint64(7))
	f.Add([]byte(`{"type":"string","minLength":1e12,"maxLength":-1}`), uint64(8))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		schema, err := decodeSchema(data)
		if err != nil {
			return
		}
		out := generate(schema, seed)
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q for schema %s", out, data)
		}
		if len(out) > 4<<20 {
			t.Fatalf("%d bytes for schema %s", len(out), data)
		}
		if again := generate(schema, seed); !bytes.Equal(again, out) {
			t.Fatalf("not deterministic for schema %s", data)
		}
		r := rng(seed)
		args := toolArguments(&r, data)
		if !json.Valid([]byte(args)) || args[0] != '{' {
			t.Fatalf("arguments %q for schema %s", args, data)
		}
	})
}
