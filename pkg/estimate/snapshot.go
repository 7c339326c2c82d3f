package estimate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
)

// predictorFormat is the layout MarshalBinary writes: the format, the
// window, then the global ring and the team and prefix groups (a count,
// then each key and ring); a ring is its next position, its count and its
// values in insertion order (float64 bits, little-endian). The sorted copy
// is rebuilt on load. Format 2 adds the progress errors after the groups,
// laid out the same way (global ring, team and prefix groups); format 1,
// without them, is still read (no progress errors learned).
const predictorFormat = 2

// MarshalBinary writes what the predictor has learned, for a snapshot
// (see pkg/snapshot). Exact is a setting, not learned, and is not written.
func (p *Predictor) MarshalBinary() ([]byte, error) {
	b := binary.AppendUvarint(nil, predictorFormat)
	b = binary.AppendUvarint(b, uint64(p.window))
	b = appendGroups(b, &p.global, p.team, p.prefix)
	pg := p.pglobal
	if pg.max == 0 {
		pg.max = p.window
	}
	b = appendGroups(b, &pg, p.pteam, p.pprefix)
	return b, nil
}

// appendGroups writes a global ring, then the team and prefix groups.
func appendGroups(b []byte, global *ring, team, prefix map[string]*ring) []byte {
	b = global.append(b)
	for _, m := range []map[string]*ring{team, prefix} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = binary.AppendUvarint(b, uint64(len(keys)))
		for _, k := range keys {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = m[k].append(b)
		}
	}
	return b
}

// UnmarshalBinary replaces what p has learned with what MarshalBinary
// wrote. It refuses another format or window, and damage, leaving p as
// it was.
func (p *Predictor) UnmarshalBinary(b []byte) error {
	r := predReader{b: b}
	f := r.uvarint()
	if f != predictorFormat && f != 1 {
		return fmt.Errorf("estimate: predictor snapshot format %d, this build reads %d and 1", f, predictorFormat)
	}
	if w := r.uvarint(); w != uint64(p.window) {
		return fmt.Errorf("estimate: predictor snapshot of window %d, this predictor keeps %d", w, p.window)
	}
	global, team, prefix := r.groups(p.window)
	pglobal, pteam, pprefix := ring{max: p.window}, map[string]*ring{}, map[string]*ring{}
	if f >= 2 {
		pglobal, pteam, pprefix = r.groups(p.window)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	if r.err != nil {
		return r.err
	}
	p.global, p.team, p.prefix = global, team, prefix
	p.pglobal, p.pteam, p.pprefix = pglobal, pteam, pprefix
	p.changed()
	return nil
}

// groups reads what appendGroups wrote.
func (r *predReader) groups(window int) (ring, map[string]*ring, map[string]*ring) {
	global := r.ring(window)
	groups := [2]map[string]*ring{}
	for i := range groups {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.fail()
		}
		groups[i] = make(map[string]*ring, min(n, 1024))
		for range n {
			if r.err != nil {
				break
			}
			k := string(r.bytes(r.uvarint()))
			g := r.ring(window / 4)
			groups[i][k] = &g
		}
	}
	return global, groups[0], groups[1]
}

func (r *ring) append(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(r.next))
	b = binary.AppendUvarint(b, uint64(len(r.vals)))
	for _, v := range r.vals {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

var errPredictor = errors.New("estimate: damaged predictor snapshot")

type predReader struct {
	b   []byte
	err error
}

func (r *predReader) fail() {
	r.err, r.b = errPredictor, nil
}

func (r *predReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *predReader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// ring reads a ring of capacity max.
func (r *predReader) ring(max int) ring {
	g := ring{max: max}
	next, n := r.uvarint(), r.uvarint()
	if r.err != nil || n > uint64(max) || n > uint64(len(r.b))/8 || next >= uint64(max) && max > 0 || next != 0 && n < uint64(max) {
		r.fail()
		return g
	}
	g.next = int(next)
	g.vals = make([]float64, n)
	for i := range g.vals {
		g.vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(r.b[8*i:]))
	}
	r.b = r.b[8*n:]
	g.sorted = slices.Clone(g.vals)
	slices.Sort(g.sorted)
	return g
}
