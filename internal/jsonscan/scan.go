package jsonscan

// Members reads data, one JSON object, whole, and calls member for each of
// its members with the key (unescaped; bytes that are not UTF-8 are kept as
// they are, where encoding/json would replace them) and the value's raw
// JSON. The whole document is checked as encoding/json checks it: a
// document that is not valid JSON, or not an object, is a *SyntaxError,
// and the first error member returns ends the reading there and is
// returned. Plain keys and values are not copied: they alias data.
func Members(data []byte, member func(key, value []byte) error) error {
	d := Decoder{Data: data}
	d.SkipSpace()
	if d.Peek() != '{' {
		return d.SyntaxError()
	}
	if err := d.Members(func(key []byte) error {
		start := d.Off
		if err := d.Skip(); err != nil {
			return err
		}
		return member(key, data[start:d.Off])
	}); err != nil {
		return err
	}
	return d.End()
}

// Elements reads data, one JSON array, whole, and calls element for each
// of its elements with the element's raw JSON, aliasing data. It checks
// the document as Members does: one that is not valid JSON, or not an
// array, is an error, and so is the first error element returns.
func Elements(data []byte, element func(value []byte) error) error {
	d := Decoder{Data: data}
	d.SkipSpace()
	if d.Peek() != '[' {
		return d.SyntaxError()
	}
	if err := d.Elements(func(int) error {
		start := d.Off
		if err := d.Skip(); err != nil {
			return err
		}
		return element(data[start:d.Off])
	}); err != nil {
		return err
	}
	return d.End()
}

// String decodes data, one JSON string, as encoding/json decodes it
// (escapes, and U+FFFD for what is not UTF-8). A string that needs no
// decoding aliases data: copy it to keep it past data's life.
func String(data []byte) (string, error) {
	d := Decoder{Data: data}
	d.SkipSpace()
	if d.Peek() != '"' {
		return "", d.SyntaxError()
	}
	s, err := d.Str()
	if err != nil {
		return "", err
	}
	return s, d.End()
}
