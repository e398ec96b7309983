package pools

import "fmt"

// FieldError is one problem of one field of a config: Field is the field's
// path as the config file spells it ("pools[0].endpoints[1].url",
// "flowControl.shed.full"), Message the problem alone ("required"). It
// lives here, under turns and affinity, so that the three packages whose
// config the gateway validates report problems in one shape.
//
// Validation reports each problem as an error that wraps a FieldError and
// names the field in its package's words ("turns: flowControl.shed.full:
// 2 is not in (start, 1]"), and joins them: an operator reads every
// problem at once, and an API finds each field and problem with
// FieldErrors, without reading the text.
type FieldError struct {
	Field   string
	Message string
}

// Error is the problem alone: the error that wraps it names the field.
func (e *FieldError) Error() string { return e.Message }

// FieldErrorf is the problem of field that format makes of args, worded
// "field: problem".
func FieldErrorf(field, format string, args ...any) error {
	return fmt.Errorf("%s: %w", field, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// FieldErrors lists the FieldErrors in err, a tree of wrapped and joined
// errors, in the order they were reported.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *FieldError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(err)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

var _ error = (*FieldError)(nil)
