package policy

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/pkg/jsonguard/jsonguardtest"
)

// TestTeamsFileBounded: a teams file nested deeper than 64 levels is
// refused before the YAML parser builds it, whether JSON or YAML, and a
// JSON one with repeated keys or invalid text is refused as a request
// is.
func TestTeamsFileBounded(t *testing.T) {
	indented := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(strings.Repeat(" ", i) + "a:\n")
		}
		return b.String()
	}
	cases := map[string]struct {
		doc, wantErr string // "" = accepted
	}{
		"YAML":                        {doc: "teams:\n  vision: {gpus: 8}\n  nlp: {share: 0.25}\n"},
		"JSON":                        {doc: `{"teams":{"vision":{"gpus":8},"nlp":{"share":0.5}}}`},
		"YAML flow":                   {doc: "{teams: {vision: {gpus: 8}}}"},
		"YAML with a quoted bracket":  {doc: "teams:\n  vision: {gpus: 8} # [[[[\n  \"n[lp\": {share: 0.25}\n"},
		"JSON nested 65 deep":         {doc: `{"teams":` + strings.Repeat("[", 64) + strings.Repeat("]", 64) + `}`, wantErr: "deeper than 64 levels"},
		"YAML flow nested 65 deep":    {doc: "teams: " + strings.Repeat("[", 64) + strings.Repeat("]", 64), wantErr: "line 1: must not nest deeper than 64 levels"},
		"YAML compact nested 65 deep": {doc: "teams:\n" + strings.Repeat("- ", 65) + "x\n", wantErr: "line 2: must not nest deeper than 64"},
		"YAML indented 65 deep":       {doc: indented(65), wantErr: "line 65: must not nest deeper than 64"},
		"YAML a million brackets":     {doc: strings.Repeat("[", MaxTeamsFileBytes), wantErr: "deeper than 64 levels"},
		"JSON repeated key":           {doc: `{"teams":{"vision":{"gpus":8},"vision":{"gpus":9}}}`, wantErr: "teams.vision: is given twice"},
		"JSON lone surrogate":         {doc: `{"teams":{"vis\ud800":{"gpus":8}}}`, wantErr: "lone surrogate"},
		"too large":                   {doc: "teams:\n" + strings.Repeat("#", MaxTeamsFileBytes), wantErr: "more than the limit of 65536"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseTeams([]byte(tc.doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want …%s…", err, tc.wantErr)
			}
		})
	}
}

// TestTeamsFileMemory: parsing an adversarial teams file as large as it
// may be, JSON or YAML, allocates at most 8 MiB: linear in the file, at
// up to 128 bytes a byte (the YAML parser's syntax tree of a document of
// tiny values), and never the square of its depth.
func TestTeamsFileMemory(t *testing.T) {
	const n, k, most = MaxTeamsFileBytes, 128, 8 << 20
	docs := jsonguardtest.Adversarial(n)
	docs["YAML flow"] = []byte("teams: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000))
	docs["YAML compact"] = []byte("teams:\n" + strings.Repeat("- ", 5000) + "x\n")
	docs["YAML flow within the limit"] = []byte("teams: [" + strings.Repeat(strings.Repeat("[", 60)+strings.Repeat("]", 60)+",", n/122-1) + "]")
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			got := jsonguardtest.Allocated(func() { _, _ = parseTeams(doc) })
			t.Logf("%d bytes: %d allocated (%.1f x)", len(doc), got, float64(got)/float64(len(doc)))
			if got > uint64(k*len(doc)) || got > most {
				t.Fatalf("parsing %d bytes allocated %d, more than %d x or %d", len(doc), got, k, most)
			}
		})
	}
}
