package jsonguard

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// Strict decodes one JSON value of data into v with encoding/json: no
// unknown field, nothing after the value. It is the one strict decoding
// of caller input behind every request API (pkg/api's Decode, an agent's
// task socket); each words its own answer from the StrictError's kind, so
// the classification of encoding/json's errors is written once. Strict
// does not bound the document: run Check first where the caller may be
// hostile.
func Strict(data []byte, v any) *StrictError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e := &StrictError{Kind: KindOther, Err: err}
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			e.Kind, e.Field, e.Type, e.Value = KindType, te.Field, te.Type, te.Value
			if te.Field == "" {
				e.Kind = KindNotObject
			}
		case errors.As(err, &se):
			e.Kind, e.Offset = KindSyntax, se.Offset
		default:
			// encoding/json has no typed error for an unknown field
			// (go.dev/issue/29035): its message, "json: unknown field
			// \"name\"", is read here and nowhere else.
			if q, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				if name, uerr := strconv.Unquote(q); uerr == nil {
					e.Kind, e.Field = KindUnknownField, name
				}
			}
		}
		return e
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the value")
		}
		return &StrictError{Kind: KindTrailing, Err: err}
	}
	return nil
}

// StrictKind classifies a StrictError.
type StrictKind int

// Kinds of StrictError.
const (
	// KindType: the value of Field has the wrong type for the Go field
	// (Type), Value describing what was sent ("number 2.5", "string").
	KindType StrictKind = iota + 1
	// KindNotObject: the document is not of the type wanted (Type; an
	// object, for a request), Value describing what it is.
	KindNotObject
	// KindSyntax: not JSON, at byte Offset.
	KindSyntax
	// KindUnknownField: Field is a key no field of the request has.
	KindUnknownField
	// KindTrailing: data after the value.
	KindTrailing
	// KindOther: anything else encoding/json refused (Err says what).
	KindOther
)

// StrictError is why Strict refused a document.
type StrictError struct {
	Kind   StrictKind
	Field  string       // KindType: the field's path; KindUnknownField: the key
	Type   reflect.Type // KindType, KindNotObject: the Go type wanted
	Value  string       // KindType, KindNotObject: what was sent
	Offset int64        // KindSyntax
	Err    error        // encoding/json's own error
}

func (e *StrictError) Error() string { return e.Err.Error() }

func (e *StrictError) Unwrap() error { return e.Err }
