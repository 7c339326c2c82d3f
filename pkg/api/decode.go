package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// The one request/reply layer of the services' NATS operations (the
// submitter's, the advisor's, an agent's logs): Decode, the one strict
// decoding of a request; ReplyOf, the one reply of a result or an error;
// Respond, sending it.

// Decode reads one JSON object into v, strictly: first one bounded
// pass (jsonguard: nesting at most 64 deep, no repeated keys — the last
// would win silently —, no invalid UTF-8 or lone surrogate, no number
// beyond a float64, no trailing data), then encoding/json with no unknown
// fields and a whole number where the field is an integer. An empty body
// leaves v as it is (the zero request). Errors name the field and the
// rule, never a Go type; "body" when the body as a whole is at fault. The
// document (nil for an empty body) tells which top-level keys were given.
func Decode(data []byte, v any) (*jsonguard.Doc, *Error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	doc, err := jsonguard.Check(data)
	if err != nil {
		var ge *jsonguard.Error
		if errors.As(err, &ge) {
			field := ge.Path
			if field == "" {
				field = "body"
			}
			return nil, invalid(field, ge.Rule)
		}
		return nil, invalid("body", err.Error())
	}
	if e := jsonguard.Strict(data, v); e != nil {
		switch e.Kind {
		case jsonguard.KindType:
			return nil, invalid(e.Field, jsonRule(e.Type.Kind(), e.Value))
		case jsonguard.KindNotObject:
			return nil, invalid("body", fmt.Sprintf("must be a JSON object (got %s)", jsonValueKind(e.Value)))
		case jsonguard.KindSyntax:
			return nil, invalid("body", fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Err.Error()))
		case jsonguard.KindUnknownField:
			return nil, invalid("body", "unknown field "+strconv.Quote(e.Field)+": not a field of this request")
		case jsonguard.KindTrailing:
			return nil, invalid("body", "invalid JSON: unexpected data after the value")
		}
		return nil, invalid("body", "invalid JSON: "+strings.TrimPrefix(e.Err.Error(), "json: "))
	}
	return doc, nil
}

// jsonRule states what a field of kind k must be; got is the decoder's
// description of the value ("number 2.5", "string", "array").
func jsonRule(k reflect.Kind, got string) string {
	var rule string
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		rule = "must be a whole number"
		if n, ok := strings.CutPrefix(got, "number "); ok {
			return fmt.Sprintf("%s (got %s)", rule, n)
		}
	case reflect.Float32, reflect.Float64:
		rule = "must be a number"
	case reflect.Bool:
		rule = "must be true or false"
	case reflect.String:
		rule = "must be a JSON string"
	case reflect.Struct, reflect.Map:
		rule = "must be a JSON object"
	case reflect.Slice, reflect.Array:
		rule = "must be a JSON array"
	default:
		rule = "has the wrong type"
	}
	return fmt.Sprintf("%s (got %s)", rule, jsonValueKind(got))
}

// jsonValueKind is the decoder's description of a value without its text:
// "number 2.5" is a number.
func jsonValueKind(got string) string {
	k, _, _ := strings.Cut(got, " ")
	if k == "" {
		return "another kind of value"
	}
	return k
}

// invalid is a 400 naming the field and the rule.
func invalid(field, rule string) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Msg: rule}
}

// ReplyOf is the reply of a result, or of err when not nil: an *Error
// keeps its field, not-found and status; any other error is an internal
// error (500).
func ReplyOf(result any, err error) Reply {
	if err == nil {
		b, merr := json.Marshal(result)
		if merr == nil {
			return Reply{Result: b}
		}
		err = merr
	}
	var e *Error
	if errors.As(err, &e) {
		return Reply{Error: e.Msg, Field: e.Field, NotFound: e.NotFound, Status: e.Status}
	}
	return Reply{Error: "internal error: " + err.Error(), Status: http.StatusInternalServerError}
}

// Respond sends r to m's reply subject (none: nothing to send).
func Respond(m *nats.Msg, r Reply) error {
	if m.Reply == "" {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return m.Respond(b)
}
