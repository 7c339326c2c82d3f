// Package jsonguardtest makes the JSON documents that tests of bounded
// decoding feed to every decoder of caller input.
package jsonguardtest

import (
	"runtime"
	"strconv"
	"strings"
)

// Adversarial returns documents of about n bytes, each a shape that costs a naive
// checker memory: deep nesting, many keys, long strings, many small
// arrays and objects.
func Adversarial(n int) map[string][]byte {
	fill := func(unit string, open, close string) []byte {
		var b strings.Builder
		b.WriteString(open)
		for b.Len() < n-len(close)-len(unit) {
			if b.Len() > len(open) {
				b.WriteByte(',')
			}
			b.WriteString(unit)
		}
		b.WriteString(close)
		return []byte(b.String())
	}
	keys := func(prefix string) []byte {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; b.Len() < n-32; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + prefix + itoa(i) + `":0`)
		}
		b.WriteString("}")
		return []byte(b.String())
	}
	deep63 := strings.Repeat("[", 63)
	return map[string][]byte{
		"deep arrays":         []byte(strings.Repeat("[", n/2) + strings.Repeat("]", n/2)),
		"deep objects":        []byte(strings.Repeat(`{"a":`, n/6) + "0" + strings.Repeat("}", n/6)),
		"unclosed arrays":     []byte(strings.Repeat("[", n)),
		"many keys":           keys("k"),
		"many escaped keys":   keys(`\u0061`),
		"long string":         []byte(`{"name":"` + strings.Repeat("x", n-12) + `"}`),
		"long escaped string": []byte(`{"name":"` + strings.Repeat(`\u00e9`, (n-12)/6) + `"}`),
		"many tiny arrays":    fill("[]", "[", "]"),
		"many tiny objects":   fill(`{"a":0,"b":0}`, "[", "]"),
		"many nested arrays":  fill(deep63[:8]+strings.Repeat("]", 8), deep63[:50]+"[", "]"+strings.Repeat("]", 50)),
		"many numbers":        fill("1e5", "[", "]"),
		"many small strings":  fill(`"é"`, "[", "]"),
		"keys at every level": []byte(strings.Repeat(`{"a":0,"b":0,"c":`, 63) + "0" + strings.Repeat("}", 63) + strings.Repeat(" ", n-63*18)),
		"big objects nested":  []byte(`{"x":` + string(keys("k")[:n/2-10]) + `0}}`),
	}
}

// Allocated is how many bytes f allocates in all (runtime.MemStats
// TotalAlloc): an upper bound of the memory f holds at its peak.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func itoa(i int) string { return strconv.Itoa(i) }
