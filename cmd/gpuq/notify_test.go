package main

import "testing"

func TestOSC9(t *testing.T) {
	cases := map[string]struct{ msg, want string }{
		"plain":                   {"gpuq: train started on node-1", "\a\033]9;gpuq: train started on node-1\a"},
		"an escape cannot end it": {"x\033]9;evil\a\u009c", "\a\033]9;x]9;evil\a"},
		"newlines dropped":        {"a\nb", "\a\033]9;ab\a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := osc9(tc.msg); got != tc.want {
				t.Errorf("osc9(%q) = %q, want %q", tc.msg, got, tc.want)
			}
		})
	}
}
