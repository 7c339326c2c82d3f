package svcmain

import (
	"bytes"
	"testing"

	"github.com/rs/zerolog"
)

// TestListAndFields: comma lists drop blanks; Shell's Fields reach every
// log line (an agent's node).
func TestListAndFields(t *testing.T) {
	cases := map[string]struct {
		in   string
		want int
	}{
		"empty":  {"", 0},
		"blanks": {" , ,", 0},
		"two":    {"a, b", 2},
	}
	for name, tc := range cases {
		if got := List(tc.in); len(got) != tc.want {
			t.Errorf("%s: List(%q) = %q, want %d items", name, tc.in, got, tc.want)
		}
	}
	var buf bytes.Buffer
	logger := Shell{Fields: map[string]string{"node": "node-1"}}.logger(zerolog.New(&buf))
	logger.Info().Msg("x")
	if !bytes.Contains(buf.Bytes(), []byte(`"node":"node-1"`)) {
		t.Errorf("log line %s lacks the node", buf.Bytes())
	}
}
