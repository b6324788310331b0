package watertightconfig

import (
	"fmt"
	"strings"
)

// Error is one problem found in a configuration file: where it is and which
// rule it breaks. Its text has the form
//
//	payments.yaml:12: bulkheads.payment.max_concurrent: must be > 0, got -3
//
// with the parts that are unknown left out.
type Error struct {
	// File is the file's name as given to Load or Parse.
	File string
	// Line is the 1-based line of the offending key or value; 0 when the
	// problem has no place in the file (it could not be read).
	Line int
	// Path names the field with dotted YAML keys,
	// "bulkheads.payment.max_concurrent"; empty for a syntax error.
	Path string
	// Msg is the rule and the value found: "must be > 0, got -3".
	Msg string
}

// Error formats the error as "file:line: path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a file, in the order of the file. Load
// and Parse return an Errors value (as an error) whenever the file is
// invalid, so that a user can fix all the mistakes in one pass; use
// errors.As to reach the list.
type Errors []*Error

// Error returns the errors one per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
