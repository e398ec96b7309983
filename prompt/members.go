package prompt

// Members reads data, one JSON object, whole, and calls member for each of
// its members with the key (unescaped; bytes that are not UTF-8 are kept as
// they are, where encoding/json would replace them) and the value's raw
// JSON. The whole
// document is checked as encoding/json checks it, with the decoder the
// request parser uses: a document that is not valid JSON, or not an object,
// is an error, and so is the first error member returns, which ends the
// reading there. Plain keys and values are not copied: they alias data.
func Members(data []byte, member func(key, value []byte) error) error {
	d := decoder{data: data}
	d.ws()
	if d.peek() != '{' {
		return d.syntaxError()
	}
	if err := d.members(func(key []byte) error {
		start := d.off
		if err := d.skip(); err != nil {
			return err
		}
		return member(key, data[start:d.off])
	}); err != nil {
		return err
	}
	return d.end()
}

// Elements reads data, one JSON array, whole, and calls element for each
// of its elements with the element's raw JSON, aliasing data. It checks
// the document as Members does: one that is not valid JSON, or not an
// array, is an error, and so is the first error element returns.
func Elements(data []byte, element func(value []byte) error) error {
	d := decoder{data: data}
	d.ws()
	if d.peek() != '[' {
		return d.syntaxError()
	}
	if err := d.elements(func(int) error {
		start := d.off
		if err := d.skip(); err != nil {
			return err
		}
		return element(data[start:d.off])
	}); err != nil {
		return err
	}
	return d.end()
}

// String decodes data, one JSON string, as encoding/json decodes it
// (escapes, and U+FFFD for what is not UTF-8). A string that needs no
// decoding aliases data: copy it to keep it past data's life.
func String(data []byte) (string, error) {
	d := decoder{data: data}
	d.ws()
	if d.peek() != '"' {
		return "", d.syntaxError()
	}
	s, err := d.str()
	if err != nil {
		return "", err
	}
	return s, d.end()
}
