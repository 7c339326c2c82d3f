package estimate

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/pkg/domain"
)

// A predictor restored from its snapshot equals the original, and keeps
// equalling it as both learn the same completions: the ring positions
// survive, not only the values.
func TestPropPredictorSnapshot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := rapid.SampledFrom([]int{4, 8, 40}).Draw(t, "window")
		task := func(t *rapid.T) *domain.Task {
			return &domain.Task{Name: rapid.SampledFrom([]string{"resnet-1", "bert_2", "gpt"}).Draw(t, "name"),
				Team: fmt.Sprint("team", rapid.IntRange(0, 3).Draw(t, "team")), Hours: 1,
				RunSeconds: float64(rapid.IntRange(0, 7200).Draw(t, "run"))}
		}
		p := NewPredictor(window)
		for range rapid.IntRange(0, 60).Draw(t, "before") {
			p.Observe(task(t))
		}
		b, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		q := NewPredictor(window)
		if err := q.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		// The bisection's memo (and its generation) is a cache of what
		// the windows give, not part of what the predictor learned.
		opts := cmp.Options{cmp.AllowUnexported(Predictor{}, ring{}), cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Predictor{}, "memo", "memoGen")}
		if diff := cmp.Diff(p, q, opts); diff != "" {
			t.Fatalf("restored (-original +restored):\n%s", diff)
		}
		for range rapid.IntRange(0, 60).Draw(t, "after") {
			tk := task(t)
			p.Observe(tk)
			q.Observe(tk)
		}
		if diff := cmp.Diff(p, q, opts); diff != "" {
			t.Fatalf("after the same completions (-original +restored):\n%s", diff)
		}
	})
}

// Damage, another format and another window are refused, and the
// predictor keeps what it had.
func TestPredictorSnapshotRefused(t *testing.T) {
	p := NewPredictor(8)
	for i := range 20 {
		p.Observe(&domain.Task{Name: "a", Team: "t", Hours: 1, RunSeconds: float64(600 * (i + 1))})
	}
	good, _ := p.MarshalBinary()
	cases := map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)-3],
		"trailing":       append(append([]byte(nil), good...), 0),
		"another format": append([]byte{3}, good[1:]...),
		"another window": append([]byte{1, 16}, good[2:]...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			q := NewPredictor(8)
			q.Observe(&domain.Task{Name: "z", Team: "z", Hours: 1, RunSeconds: 60})
			before, _ := q.MarshalBinary()
			if err := q.UnmarshalBinary(b); err == nil {
				t.Fatal("UnmarshalBinary accepted it")
			}
			if after, _ := q.MarshalBinary(); string(after) != string(before) {
				t.Fatal("a refused snapshot changed the predictor")
			}
		})
	}
}
