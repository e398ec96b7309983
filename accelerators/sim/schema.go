package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A JSON schema is decoded into plain values that keep the order of
// object members (jsonObject), because an engine that constrains its
// output to a schema writes properties in the order they are declared,
// and so does the simulator. Values are nil, bool, json.Number, string,
// []any and jsonObject.

// jsonObject is a decoded JSON object, its members in document order.
type jsonObject []jsonMember

type jsonMember struct {
	key string
	val any
}

// get is the value of the first member named key.
func (o jsonObject) get(key string) (any, bool) {
	if i := o.index(key); i >= 0 {
		return o[i].val, true
	}
	return nil, false
}

func (o jsonObject) has(key string) bool { return o.index(key) >= 0 }

// index is the position of the first member named key, or -1.
func (o jsonObject) index(key string) int {
	for i, m := range o {
		if m.key == key {
			return i
		}
	}
	return -1
}

// isTrue is keyword key's value when it is a boolean, else false.
func (o jsonObject) isTrue(key string) bool {
	v, _ := o.get(key)
	b, _ := v.(bool)
	return b
}

// without is o less its members named key, in a new slice.
func (o jsonObject) without(key string) jsonObject {
	out := make(jsonObject, 0, len(o))
	for _, m := range o {
		if m.key != key {
			out = append(out, m)
		}
	}
	return out
}

// maxSchemaNesting bounds how deeply a schema document may nest, so that
// decoding and writing its const and enum values recurse a bounded depth.
const maxSchemaNesting = 256

var errSchemaNesting = errors.New("schema nests too deeply")

// decodeSchema decodes one JSON document, keeping member order.
func decodeSchema(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil
	}
	if depth >= maxSchemaNesting {
		return nil, errSchemaNesting
	}
	switch d {
	case '[':
		arr := []any{}
		for dec.More() {
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	case '{':
		obj := jsonObject{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string) // the decoder yields only strings as keys
			v, err := decodeValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			obj = append(obj, jsonMember{key, v})
		}
		_, err := dec.Token()
		return obj, err
	}
	return nil, fmt.Errorf("unexpected %v", d)
}

// Bounds on one generated value, so that any schema, recursive or
// hostile, yields a finite answer soon.
const (
	// schemaSoftDepth is the nesting past which objects carry only their
	// required properties and arrays their fewest items, so recursive
	// schemas with optional recursion bottom out.
	schemaSoftDepth = 6
	// schemaHardDepth is the nesting past which every value is the
	// smallest of its type. A schema that requires deeper nesting is not
	// satisfied there; none a client means to use does.
	schemaHardDepth = 24
	// schemaMaxBytes is the length after which the values still to come
	// are written smallest.
	schemaMaxBytes = 32 << 10
	// schemaMaxSteps bounds the $ref and allOf/anyOf/oneOf steps taken to
	// find one value's schema, so reference cycles end.
	schemaMaxSteps = 64
	// schemaMaxItems and schemaMaxString cap what minItems,
	// minProperties and minLength may ask for.
	schemaMaxItems  = 64
	schemaMaxString = 1024
	// schemaMaxExact bounds numbers to ±2^53, where integers are exact in
	// float64 and in JavaScript clients.
	schemaMaxExact = 1 << 53
)

// schemaGen writes JSON values that satisfy a JSON schema, drawing every
// choice from r, so the same seed writes the same value. It honours the
// keywords structured-output engines do: type (one or a list, "null"
// among them), const, enum, properties and required, additionalProperties,
// min/maxProperties, items, prefixItems, min/maxItems, uniqueItems,
// min/maxLength, format, minimum, maximum, exclusiveMinimum/Maximum (both
// drafts' spellings), multipleOf, $ref to the same document, allOf
// (merged), and anyOf/oneOf (the first branch that allows more than
// null). pattern, not, if/then/else and contains are not read.
//
// The output is ASCII: other characters are written as \u escapes, so an
// answer cut into 4-byte tokens never splits a character.
type schemaGen struct {
	r    *rng
	root any // the document $refs resolve against
	b    []byte
	// steps counts the resolving steps of the current value.
	steps int
	// deep is set past schemaSoftDepth: where null is allowed it is
	// taken, which is how strict-mode schemas (every property required,
	// recursion through nullable ones) end.
	deep bool
}

// value writes a value that satisfies schema s at nesting depth.
func (g *schemaGen) value(s any, depth int) {
	g.steps, g.deep = 0, depth >= schemaSoftDepth
	o, ok := g.resolve(s)
	if !ok {
		// The false schema: no value is valid.
		g.b = append(g.b, "null"...)
		return
	}
	if c, ok := o.get("const"); ok {
		g.b = appendJSONValue(g.b, c)
		return
	}
	if e, _ := o.get("enum"); len(asArray(e)) > 0 {
		l := asArray(e)
		g.b = appendJSONValue(g.b, l[g.r.next()%uint64(len(l))])
		return
	}
	small := depth >= schemaHardDepth || len(g.b) >= schemaMaxBytes
	switch g.schemaType(o) {
	case "object":
		g.object(o, depth, small)
	case "array":
		g.array(o, depth, small)
	case "integer":
		g.integer(o, small)
	case "number":
		g.number(o, small)
	case "boolean":
		if small {
			g.b = append(g.b, "false"...)
		} else {
			g.b = strconv.AppendBool(g.b, g.r.next()&1 == 0)
		}
	case "null":
		g.b = append(g.b, "null"...)
	default:
		g.str(o, small)
	}
}

// arguments writes a tool call's arguments: the object schema s
// describes, {} when it describes none.
func (g *schemaGen) arguments(s any) {
	g.steps, g.deep = 0, false
	o, ok := g.resolve(s)
	if !ok {
		o = nil
	}
	g.object(o, 0, false)
}

// resolve follows $ref, allOf, anyOf and oneOf until s is one schema
// object; ok is false for the false schema. A schema that is not an
// object (true, or not a schema) comes back nil: any value.
func (g *schemaGen) resolve(s any) (o jsonObject, ok bool) {
	switch s := s.(type) {
	case bool:
		return nil, s
	case jsonObject:
		o = s
	default:
		return nil, true
	}
	for g.steps < schemaMaxSteps {
		switch {
		case o.has("$ref"):
			g.steps++
			ref, _ := o.get("$ref")
			rest := o.without("$ref")
			target, found := g.lookup(ref)
			if !found {
				o = rest // another document, or a name not there: unread
				continue
			}
			t, ok := g.resolve(target)
			if !ok {
				return nil, false
			}
			o = mergeSchemas(rest, t)
		case o.has("allOf"):
			g.steps++
			all, _ := o.get("allOf")
			o = o.without("allOf")
			for _, branch := range asArray(all) {
				t, ok := g.resolve(branch)
				if !ok {
					return nil, false
				}
				o = mergeSchemas(o, t)
			}
		case o.has("anyOf") || o.has("oneOf"):
			g.steps++
			key := "anyOf"
			if !o.has(key) {
				key = "oneOf"
			}
			branches, _ := o.get(key)
			o = o.without(key)
			if b, found := g.branch(asArray(branches)); found {
				t, ok := g.resolve(b)
				if !ok {
					return nil, false
				}
				o = mergeSchemas(o, t)
			}
		default:
			return o, true
		}
	}
	return o, true
}

// branch is the branch of an anyOf or oneOf a model would take: the
// first that allows more than null (Optional fields list null second, but
// not always), else the first; when deep, the null one.
func (g *schemaGen) branch(branches []any) (any, bool) {
	if len(branches) == 0 {
		return nil, false
	}
	for _, b := range branches {
		o, _ := b.(jsonObject)
		if t, _ := o.get("type"); (t == "null") != g.deep || b == false {
			continue
		}
		return b, true
	}
	return branches[0], true
}

// mergeSchemas is a with b's keywords added, as allOf and a $ref with
// siblings mean: properties and required are joined; any other keyword a
// has wins.
func mergeSchemas(a, b jsonObject) jsonObject {
	out := make(jsonObject, len(a), len(a)+len(b))
	copy(out, a)
	for _, m := range b {
		i := out.index(m.key)
		switch {
		case i < 0:
			out = append(out, m)
		case m.key == "properties":
			ap, aok := out[i].val.(jsonObject)
			bp, bok := m.val.(jsonObject)
			if aok && bok {
				joined := append(jsonObject{}, ap...)
				for _, p := range bp {
					if !joined.has(p.key) {
						joined = append(joined, p)
					}
				}
				out[i].val = joined
			}
		case m.key == "required":
			ar, aok := out[i].val.([]any)
			br, bok := m.val.([]any)
			if aok && bok {
				joined := append([]any{}, ar...)
				for _, r := range br {
					if !containsValue(joined, r) {
						joined = append(joined, r)
					}
				}
				out[i].val = joined
			}
		}
	}
	return out
}

// lookup finds a $ref in the document: "#" and JSON pointers
// ("#/$defs/Name", "#/definitions/Name", "#/properties/a/items"). Other
// documents and named anchors are not followed.
func (g *schemaGen) lookup(ref any) (any, bool) {
	s, _ := ref.(string)
	frag, ok := strings.CutPrefix(s, "#")
	if !ok {
		return nil, false
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	cur := g.root
	if frag == "" {
		return cur, true
	}
	if frag[0] != '/' {
		return nil, false
	}
	for tok := range strings.SplitSeq(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case jsonObject:
			v, ok := c.get(tok)
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// schemaType is the type a value of o takes: its type, the first that is
// not "null" of a list, or the one its keywords imply; "" for any. When
// deep, a nullable schema (a list with "null", OpenAPI's nullable) is
// null.
func (g *schemaGen) schemaType(o jsonObject) string {
	if g.deep && o.isTrue("nullable") {
		return "null"
	}
	switch t, _ := o.get("type"); t := t.(type) {
	case string:
		return t
	case []any:
		if g.deep && containsValue(t, "null") {
			return "null"
		}
		null := false
		for _, v := range t {
			if s, _ := v.(string); s != "" && s != "null" {
				return s
			}
			null = null || v == "null"
		}
		if null {
			return "null"
		}
	}
	for _, k := range []struct{ key, typ string }{
		{"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
		{"minProperties", "object"}, {"maxProperties", "object"},
		{"items", "array"}, {"prefixItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
		{"minLength", "string"}, {"maxLength", "string"}, {"format", "string"},
		{"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"},
		{"exclusiveMaximum", "number"}, {"multipleOf", "number"},
	} {
		if o.has(k.key) {
			return k.typ
		}
	}
	return ""
}

// object writes an object: its required properties, and of the optional
// ones, each on a draw, or all of them when the schema requires none,
// since schemas that list no required properties are mostly ones whose
// author left them unmarked (tool parameters), and a model fills those.
func (g *schemaGen) object(o jsonObject, depth int, small bool) {
	if small {
		g.b = append(g.b, "{}"...)
		return
	}
	props, _ := o.get("properties")
	properties, _ := props.(jsonObject)
	reqv, _ := o.get("required")
	required := map[string]bool{}
	for _, r := range asArray(reqv) {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	extra, _ := o.get("additionalProperties")
	// room is how many optional members maxProperties leaves.
	room := math.MaxInt
	if maxp, ok := intKeyword(o, "maxProperties"); ok {
		room = max(0, maxp-len(required))
	}
	minProps, _ := intKeyword(o, "minProperties")
	minProps = min(minProps, schemaMaxItems)
	all := len(required) == 0
	seen := make(map[string]bool, len(properties)+len(required))
	g.b = append(g.b, '{')
	member := func(key string, s any, optional bool) {
		if optional {
			room--
		}
		if len(seen) > 0 {
			g.b = append(g.b, ',')
		}
		seen[key] = true
		g.b = appendJSONString(g.b, key)
		g.b = append(g.b, ':')
		g.value(s, depth+1)
	}
	for _, p := range properties {
		switch {
		case seen[p.key]:
		case required[p.key]:
			member(p.key, p.val, false)
		case room > 0 && depth < schemaSoftDepth && (all || g.r.next()&1 == 0):
			member(p.key, p.val, true)
		}
	}
	// Required names the properties do not describe.
	for _, r := range asArray(reqv) {
		if s, ok := r.(string); ok && !seen[s] {
			member(s, extraSchema(extra), false)
		}
	}
	// minProperties: the optional properties left out, then new names
	// where additional properties are allowed.
	for _, p := range properties {
		if len(seen) >= minProps || room == 0 {
			break
		}
		if !seen[p.key] {
			member(p.key, p.val, true)
		}
	}
	for i := 0; len(seen) < minProps && room > 0 && extra != false && i < 2*schemaMaxItems; i++ {
		if key := g.r.word() + "_" + strconv.Itoa(i); !seen[key] {
			member(key, extraSchema(extra), true)
		}
	}
	g.b = append(g.b, '}')
}

// extraSchema is the schema of members beyond the properties: that of
// additionalProperties, or any value.
func extraSchema(extra any) any {
	if o, ok := extra.(jsonObject); ok {
		return o
	}
	return true
}

// array writes an array of one to three items where the bounds allow,
// fewest past schemaSoftDepth; tuples (prefixItems, or draft 4's items
// list) are given in full.
func (g *schemaGen) array(o jsonObject, depth int, small bool) {
	if small {
		g.b = append(g.b, "[]"...)
		return
	}
	var prefix []any
	if p, _ := o.get("prefixItems"); p != nil {
		prefix = asArray(p)
	}
	items, _ := o.get("items")
	if l, ok := items.([]any); ok {
		prefix = l
		items, _ = o.get("additionalItems")
	}
	lo, _ := intKeyword(o, "minItems")
	lo = min(lo, schemaMaxItems)
	hi := schemaMaxItems
	if m, ok := intKeyword(o, "maxItems"); ok {
		hi = min(m, hi)
	}
	if items == false {
		hi = min(hi, len(prefix)) // nothing past the tuple
	}
	hi = max(hi, lo) // unsatisfiable bounds: minItems wins
	n := lo
	if depth < schemaSoftDepth {
		base, top := max(lo, 1), max(lo, 1)+2
		if len(prefix) > 0 {
			base = max(lo, len(prefix)) // a tuple is given whole
			top = base
		}
		base, top = min(base, hi), min(top, hi)
		n = base + int(g.r.next()%uint64(top-base+1))
	}
	unique := o.isTrue("uniqueItems")
	var spans [][2]int // the items written, when they must differ
	g.b = append(g.b, '[')
	count := 0
	for tries := 0; count < n && tries < 4*n; tries++ {
		mark := len(g.b)
		if count > 0 {
			g.b = append(g.b, ',')
		}
		at := len(g.b)
		s := items
		if count < len(prefix) {
			s = prefix[count]
		}
		if s == nil {
			s = true
		}
		g.value(s, depth+1)
		if unique {
			if g.repeats(spans, at) {
				g.b = g.b[:mark]
				continue
			}
			spans = append(spans, [2]int{at, len(g.b)})
		}
		count++
	}
	g.b = append(g.b, ']')
}

// repeats reports whether the item written from at equals one of spans.
// Values this generator writes for the same schema are equal exactly when
// their bytes are.
func (g *schemaGen) repeats(spans [][2]int, at int) bool {
	item := g.b[at:]
	for _, s := range spans {
		if bytes.Equal(g.b[s[0]:s[1]], item) {
			return true
		}
	}
	return false
}

// str writes a string: one in the schema's format where it names one the
// generator knows, else one to three words, then fitted to min/maxLength.
func (g *schemaGen) str(o jsonObject, small bool) {
	lo, _ := intKeyword(o, "minLength")
	lo = min(lo, schemaMaxString)
	hi, bounded := intKeyword(o, "maxLength")
	var s []byte
	if !small {
		f, _ := o.get("format")
		format, _ := f.(string)
		if !g.formatted(&s, format) {
			for i := range 1 + g.r.next()%3 {
				if i > 0 {
					s = append(s, ' ')
				}
				s = append(s, g.r.word()...)
			}
		}
	}
	for len(s) < lo {
		if len(s) > 0 {
			s = append(s, ' ')
		}
		s = append(s, g.r.word()...)
	}
	if bounded && len(s) > max(hi, lo) {
		s = s[:max(hi, lo)]
	}
	// Every byte is ASCII, so bytes are characters for the length bounds.
	g.b = appendJSONString(g.b, string(s))
}

// formatted appends a string in format to s, and reports whether it knew
// the format.
func (g *schemaGen) formatted(s *[]byte, format string) bool {
	n := func(k uint64) uint64 { return g.r.next() % k }
	switch format {
	case "date-time":
		*s = fmt.Appendf(*s, "2025-%02d-%02dT%02d:%02d:%02dZ", 1+n(12), 1+n(28), n(24), n(60), n(60))
	case "date":
		*s = fmt.Appendf(*s, "2025-%02d-%02d", 1+n(12), 1+n(28))
	case "time":
		*s = fmt.Appendf(*s, "%02d:%02d:%02dZ", n(24), n(60), n(60))
	case "duration":
		*s = fmt.Appendf(*s, "PT%dM", 1+n(59))
	case "email", "idn-email":
		*s = fmt.Appendf(*s, "%s@example.com", g.r.word())
	case "hostname", "idn-hostname":
		*s = fmt.Appendf(*s, "%s.example.com", g.r.word())
	case "uri", "url", "iri", "uri-reference", "iri-reference":
		*s = fmt.Appendf(*s, "https://example.com/%s", g.r.word())
	case "ipv4":
		*s = fmt.Appendf(*s, "10.%d.%d.%d", n(256), n(256), 1+n(254))
	case "ipv6":
		*s = fmt.Appendf(*s, "fd00::%x", 1+n(0xffff))
	case "uuid":
		a, b := g.r.next(), g.r.next()
		*s = fmt.Appendf(*s, "%08x-%04x-4%03x-%04x-%012x", a>>32, a>>16&0xffff, a&0xfff, 0x8000|b>>48&0x3fff, b&0xffffffffffff)
	default:
		return false
	}
	return true
}

// bounds are a numeric schema's limits, clamped to ±schemaMaxExact;
// missing ones are the clamp.
type bounds struct {
	lo, hi     float64
	exLo, exHi bool
}

func readBounds(o jsonObject) bounds {
	b := bounds{lo: -schemaMaxExact, hi: schemaMaxExact}
	if v, ok := numKeyword(o, "minimum"); ok {
		b.lo = v
		b.exLo = o.isTrue("exclusiveMinimum") // draft 4
	}
	if v, ok := numKeyword(o, "maximum"); ok {
		b.hi = v
		b.exHi = o.isTrue("exclusiveMaximum")
	}
	if v, ok := numKeyword(o, "exclusiveMinimum"); ok && v >= b.lo {
		b.lo, b.exLo = v, true
	}
	if v, ok := numKeyword(o, "exclusiveMaximum"); ok && v <= b.hi {
		b.hi, b.exHi = v, true
	}
	clamp := func(v float64) float64 { return max(-schemaMaxExact, min(schemaMaxExact, v)) }
	b.lo, b.hi = clamp(b.lo), clamp(b.hi)
	return b
}

// steps is the range of integers k whose value val(k) lies within b;
// unit is the step val takes, to start the search.
func (b bounds) steps(unit float64, val func(int64) float64) (lo, hi int64) {
	lo, hi = int64(math.Ceil(b.lo/unit)), int64(math.Floor(b.hi/unit))
	// Division rounds; two steps in from each end settle it.
	for range 2 {
		if v := val(lo); v < b.lo || b.exLo && v == b.lo {
			lo++
		}
		if v := val(hi); v > b.hi || b.exHi && v == b.hi {
			hi--
		}
	}
	return lo, hi
}

// pick draws k from [lo, hi] narrowed to at most 100 values near zero, as
// models pick small numbers: [0, 99] where it overlaps, else the 100
// nearest to it. An empty range gives lo.
func (g *schemaGen) pick(lo, hi int64, small bool) int64 {
	wlo, whi := max(lo, 0), min(hi, 99)
	switch {
	case wlo <= whi:
	case lo > 99:
		wlo, whi = lo, min(hi, lo+99)
	default:
		wlo, whi = max(lo, hi-99), hi
	}
	if small || whi <= wlo {
		return wlo
	}
	return wlo + int64(g.r.next()%uint64(whi-wlo+1))
}

// multiple is the schema's multipleOf where it is usable: positive, and
// not so small against the bounds that the count of steps overflows.
func multiple(o jsonObject, b bounds) (float64, bool) {
	m, ok := numKeyword(o, "multipleOf")
	if !ok || !(m > 0) {
		return 0, false
	}
	if math.Abs(b.lo/m) > schemaMaxExact || math.Abs(b.hi/m) > schemaMaxExact {
		return 0, false
	}
	return m, true
}

func (g *schemaGen) integer(o jsonObject, small bool) {
	b := readBounds(o)
	unit := int64(1)
	if m, ok := multiple(o, b); ok && m == math.Trunc(m) {
		unit = int64(m)
	}
	lo, hi := b.steps(float64(unit), func(k int64) float64 { return float64(k * unit) })
	g.b = strconv.AppendInt(g.b, g.pick(lo, hi, small)*unit, 10)
}

// number writes a whole number where the range is wide, since models
// write 30 for a timeout and clients declare integer parameters as
// "number"; in narrow ranges ([0, 1]) the coarsest decimals that fit;
// steps of multipleOf.
func (g *schemaGen) number(o jsonObject, small bool) {
	b := readBounds(o)
	if m, ok := multiple(o, b); ok {
		val := func(k int64) float64 { return float64(k) * m }
		if lo, hi := b.steps(m, val); lo <= hi {
			g.b = strconv.AppendFloat(g.b, val(g.pick(lo, hi, small)), 'f', -1, 64)
			return
		}
	} else {
		for scale := 1.0; scale <= 1e9; scale *= 10 {
			if scale == 1 && b.hi-b.lo < 10 {
				continue
			}
			if max(math.Abs(b.lo), math.Abs(b.hi))*scale > schemaMaxExact {
				break // the steps would not count exactly
			}
			// Dividing by a power of ten is exact where ×0.1 is not.
			val := func(k int64) float64 { return float64(k) / scale }
			if lo, hi := b.steps(1/scale, val); lo <= hi {
				g.b = strconv.AppendFloat(g.b, val(g.pick(lo, hi, small)), 'f', -1, 64)
				return
			}
		}
	}
	// No step fits: a value between the bounds.
	g.b = strconv.AppendFloat(g.b, (b.lo+b.hi)/2, 'f', -1, 64)
}

// anyObject writes an object of one to four members of mixed types, the
// answer to json_object, which asks for JSON but names no schema.
func (g *schemaGen) anyObject() {
	g.b = append(g.b, '{')
	seen := map[string]bool{}
	for i := range 1 + g.r.next()%4 {
		key := g.r.word()
		for seen[key] {
			key += "_" + strconv.FormatUint(i, 10)
		}
		seen[key] = true
		if i > 0 {
			g.b = append(g.b, ',')
		}
		g.b = appendJSONString(g.b, key)
		g.b = append(g.b, ':')
		switch g.r.next() % 4 {
		case 0:
			g.b = strconv.AppendUint(g.b, g.r.next()%100, 10)
		case 1:
			g.b = strconv.AppendBool(g.b, g.r.next()&1 == 0)
		case 2:
			g.b = append(g.b, '[')
			g.b = appendJSONString(g.b, g.r.word())
			g.b = append(g.b, ']')
		default:
			g.b = appendJSONString(g.b, g.r.word()+" "+g.r.word())
		}
	}
	g.b = append(g.b, '}')
}

func asArray(v any) []any {
	l, _ := v.([]any)
	return l
}

func numKeyword(o jsonObject, key string) (float64, bool) {
	v, _ := o.get(key)
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// intKeyword is a count keyword (minItems, maxLength, …): a non-negative
// number, rounded down, at most schemaMaxExact.
func intKeyword(o jsonObject, key string) (int, bool) {
	f, ok := numKeyword(o, key)
	if !ok || f < 0 {
		return 0, false
	}
	return int(min(math.Floor(f), schemaMaxExact)), true
}

func containsValue(l []any, v any) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// appendJSONValue writes a decoded value back as JSON, in ASCII.
func appendJSONValue(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...)
	case bool:
		return strconv.AppendBool(b, v)
	case json.Number:
		return append(b, string(v)...)
	case string:
		return appendJSONString(b, v)
	case []any:
		b = append(b, '[')
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONValue(b, x)
		}
		return append(b, ']')
	case jsonObject:
		b = append(b, '{')
		for i, m := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, m.key)
			b = append(b, ':')
			b = appendJSONValue(b, m.val)
		}
		return append(b, '}')
	}
	panic(fmt.Sprintf("sim: %T is not a decoded JSON value", v))
}

// appendJSONString writes s as a JSON string in ASCII: characters beyond
// it as \u escapes (surrogate pairs above U+FFFF), invalid UTF-8 as
// U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
	}
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = u(b, rune(c))
			default:
				b = append(b, c)
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			b = u(u(b, hi), lo)
		} else {
			b = u(b, r)
		}
	}
	return append(b, '"')
}
