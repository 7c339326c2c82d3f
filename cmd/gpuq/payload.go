package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Shortening of event payloads for a terminal (history and watch without
// --wide or --json): long strings keep their start (ids, text) or, with a
// '/', their end (paths); arrays show their first element; nested objects of
// more than three keys (the exported environment) show only their size;
// the whole line is cut after maxPayload characters.
const (
	maxString  = 24
	keepString = 13
	maxText    = 40
	maxPayload = 200
)

// shorten renders a payload for people. A payload that is not valid JSON
// is cut as text.
func shorten(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	s, err := shortValue(dec, 0)
	if err != nil {
		s = string(data)
	}
	return cutLine(s, maxPayload)
}

func shortValue(dec *json.Decoder, depth int) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch v := tok.(type) {
	case json.Delim:
		var parts []string
		for dec.More() {
			if v == '{' {
				k, err := dec.Token()
				if err != nil {
					return "", err
				}
				val, err := shortValue(dec, depth+1)
				if err != nil {
					return "", err
				}
				kb, _ := json.Marshal(k)
				parts = append(parts, string(kb)+":"+val)
			} else {
				val, err := shortValue(dec, depth+1)
				if err != nil {
					return "", err
				}
				parts = append(parts, val)
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return "", err
		}
		if v == '{' {
			if depth > 0 && len(parts) > 3 {
				return "{…" + itoa(len(parts)) + " keys}", nil
			}
			return "{" + strings.Join(parts, ",") + "}", nil
		}
		if len(parts) > 1 {
			return "[" + parts[0] + ",…]", nil
		}
		return "[" + strings.Join(parts, ",") + "]", nil
	case string:
		return quoteShort(v), nil
	case nil:
		return "null", nil
	default:
		b, _ := json.Marshal(v)
		return string(b), nil
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// quoteShort quotes s, shortened: an id (no spaces) longer than
// maxString keeps its first keepString characters, text with spaces
// longer than maxText its first maxText-8, and a path (a '/') longer than
// maxText its last elements, as many as fit.
func quoteShort(s string) string {
	r := []rune(s)
	switch {
	case strings.Contains(s, "/") && len(r) > maxText:
		parts := strings.Split(s, "/")
		tail := parts[len(parts)-1]
		for i := len(parts) - 2; i >= 0 && utf8.RuneCountInString(parts[i])+1+utf8.RuneCountInString(tail) <= maxText-2; i-- {
			tail = parts[i] + "/" + tail
		}
		if tr := []rune(tail); len(tr) > maxText-2 {
			tail = string(tr[len(tr)-(maxText-2):])
		}
		s = "…/" + tail
	case strings.Contains(s, " ") && len(r) > maxText:
		s = string(r[:maxText-8]) + "…"
	case !strings.Contains(s, " ") && !strings.Contains(s, "/") && len(r) > maxString:
		s = string(r[:keepString]) + "…"
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// cutLine cuts s after max characters, at a comma when there is one, and
// closes it with "…}".
func cutLine(s string, max int) string {
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	r := []rune(s)[:max]
	cut := string(r)
	if i := strings.LastIndex(cut, ","); i > 0 {
		cut = cut[:i+1]
	}
	return cut + "…}"
}
