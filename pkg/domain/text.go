package domain

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// CheckText refuses text that could rewrite a terminal or hide what it
// says when gpuq prints it (`gpuq queue`, `show`, `history`): invalid
// UTF-8, control characters (C0, DEL, C1: ESC starts a terminal escape
// sequence), and the Unicode bidirectional controls (U+202A–U+202E,
// U+2066–U+2069, U+200E, U+200F, U+061C) that reorder what is displayed.
// multiline allows tab and newline (a command). The error names the field,
// the rule and the first offending character with its byte offset.
func CheckText(field, s string, multiline bool) error {
	if !utf8.ValidString(s) {
		return &FieldError{field, "must be valid UTF-8"}
	}
	for i, c := range s {
		if multiline && (c == '\t' || c == '\n') {
			continue
		}
		if unicode.IsControl(c) || bidiControl(c) {
			rule := "must not contain control characters"
			if multiline {
				rule = "must not contain control characters other than tab and newline"
			}
			return &FieldError{field, fmt.Sprintf("%s (got %U at byte %d)", rule, c, i)}
		}
	}
	return nil
}

// CheckVisible refuses, in a name or a team, the characters that print
// as nothing or reorder what is around them: Unicode's format characters
// (category Cf: the zero-width space, joiners and no-break space U+200B–
// U+200D, U+2060, U+FEFF, the bidi controls, the soft hyphen), so that two
// names that look the same are the same.
func CheckVisible(field, s string) error {
	for i, c := range s {
		if unicode.Is(unicode.Cf, c) || unicode.IsControl(c) {
			return &FieldError{field, fmt.Sprintf("must not contain invisible or formatting characters (got %U at byte %d)", c, i)}
		}
	}
	return nil
}

func bidiControl(c rune) bool {
	return c >= 0x202A && c <= 0x202E || c >= 0x2066 && c <= 0x2069 || c == 0x200E || c == 0x200F || c == 0x061C
}
