package domain

import (
	"fmt"
	"strings"
)

// Priority is a task's class. Classes are ordered by rank (the integer),
// never by name.
type Priority int

// Priority classes, lowest rank first. Low is 1 so the zero value is invalid.
const (
	Low Priority = iota + 1
	Medium
	High
	Critical
)

// Priorities lists the classes highest first.
var Priorities = []Priority{Critical, High, Medium, Low}

var priorityNames = map[Priority]string{Low: "low", Medium: "medium", High: "high", Critical: "critical"}

func (p Priority) String() string {
	if n, ok := priorityNames[p]; ok {
		return n
	}
	return fmt.Sprintf("priority(%d)", int(p))
}

// Valid reports whether p is one of the four classes.
func (p Priority) Valid() bool { return p >= Low && p <= Critical }

// ParsePriority reads a class name, case-insensitively.
func ParsePriority(s string) (Priority, error) {
	for p, n := range priorityNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("priority %q: must be one of critical, high, medium, low", s)
}

// MarshalText writes the wire name.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads the wire name.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
