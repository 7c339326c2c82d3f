package policy

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpuq/gpuq/pkg/domain"
	"github.com/gpuq/gpuq/pkg/jsonguard"
)

// parseTeams reads a teams document, YAML or JSON (JSON is YAML), from its
// syntax tree, so that every error names its line and column and the rule,
// never a Go type:
//
//	teams:
//	  vision: {gpus: 8}
//	  nlp: {share: 0.25}
func parseTeams(b []byte) (Teams, error) {
	if len(b) > MaxTeamsFileBytes {
		return nil, fmt.Errorf("the file is %d bytes, more than the limit of %d", len(b), MaxTeamsFileBytes)
	}
	if err := checkNesting(b); err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("the file is empty: want a mapping `teams:` of team → {gpus: N} or {share: F}")
	}
	root := doc.Content[0]
	at := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("line %d, column %d: %s", n.Line, n.Column, fmt.Sprintf(format, a...))
	}
	if root.Kind != yaml.MappingNode {
		return nil, at(root, "want a mapping with the key `teams`")
	}
	var teams *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "teams" {
			return nil, at(k, "unknown key %q (the only key is `teams`)", k.Value)
		}
		teams = v
	}
	if teams == nil {
		return nil, at(root, "no `teams` key")
	}
	if teams.Kind != yaml.MappingNode {
		return nil, at(teams, "`teams` must be a mapping of team → {gpus: N} or {share: F}")
	}
	out := Teams{}
	for i := 0; i+1 < len(teams.Content); i += 2 {
		k, v := teams.Content[i], teams.Content[i+1]
		name := k.Value
		if !domain.ValidTeam(name) {
			return nil, at(k, "team %q: the name %s", name, domain.TeamRule)
		}
		if _, dup := out[name]; dup {
			return nil, at(k, "team %q appears twice", name)
		}
		if v.Kind != yaml.MappingNode {
			return nil, at(v, "team %s: want {gpus: N} or {share: F}", name)
		}
		var g Guarantee
		var hasGPUs, hasShare bool
		for j := 0; j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			switch fk.Value {
			case "gpus":
				n, err := strconv.Atoi(fv.Value)
				if fv.Kind != yaml.ScalarNode || err != nil || n < 1 {
					return nil, at(fv, "team %s: gpus must be a whole number ≥ 1 (got %q)", name, fv.Value)
				}
				g.GPUs, hasGPUs = n, true
			case "share":
				f, err := strconv.ParseFloat(fv.Value, 64)
				if fv.Kind != yaml.ScalarNode || err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
					return nil, at(fv, "team %s: share must be a number in (0, 1] (got %q)", name, fv.Value)
				}
				g.Share, hasShare = f, true
			default:
				return nil, at(fk, "team %s: unknown key %q (known: gpus, share)", name, fk.Value)
			}
		}
		switch {
		case hasGPUs && hasShare:
			return nil, at(v, "team %s: give gpus or share, not both", name)
		case !hasGPUs && !hasShare:
			return nil, at(v, "team %s: give gpus or share", name)
		}
		out[name] = g
	}
	return out, nil
}

// CheckCluster reports guarantees that cannot all be met on a cluster of
// total healthy GPUs: GPU counts adding up to more than the cluster, or
// counts and shares together exceeding it.
func (ts Teams) CheckCluster(total int) error {
	if total <= 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(ts))
	sum := 0
	for _, n := range names {
		sum += ts[n].of(total)
	}
	if sum > total {
		parts := make([]string, 0, len(names))
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %d", n, ts[n].of(total)))
		}
		return fmt.Errorf("teams: the guarantees add up to %d GPUs (%s) on a cluster of %d: they cannot all be met", sum, strings.Join(parts, ", "), total)
	}
	return nil
}

// MaxTeamsFileBytes bounds a teams file (a line or two a team). The YAML
// parser's syntax tree costs up to about a hundred bytes for each byte of
// a document of many tiny values, so the limit bounds its memory too.
const MaxTeamsFileBytes = 64 << 10

// checkNesting bounds the work of parsing a teams file before the YAML
// parser sees it: a JSON document goes through jsonguard (nesting at
// most jsonguard.MaxDepth, no repeated keys, valid UTF-8); YAML through a
// scan that over-estimates its nesting — block levels by indentation,
// compact "- " and "? " entries, flow brackets outside quotes — and
// refuses more than jsonguard.MaxDepth levels. (The YAML parser's own
// limit is 10,000 levels, and its work grows with the square of the
// depth.)
func checkNesting(b []byte) error {
	_, err := jsonguard.Check(b)
	var ge *jsonguard.Error
	if err == nil || errors.As(err, &ge) && !ge.Syntax {
		if err != nil && ge.Path != "" {
			return fmt.Errorf("%s: %s", ge.Path, ge.Rule)
		}
		return err
	}
	return yamlNesting(b)
}

// yamlNesting refuses a YAML document that might nest deeper than
// jsonguard.MaxDepth levels (see checkNesting).
func yamlNesting(b []byte) error {
	var indents []int // the indentation of the open block levels
	flow := 0
	for n, line := range bytes.Split(b, []byte("\n")) {
		i := 0
		for i < len(line) && line[i] == ' ' {
			i++
		}
		if i == len(line) || line[i] == '#' || line[i] == '\r' {
			continue
		}
		if flow == 0 {
			for len(indents) > 0 && indents[len(indents)-1] >= i {
				indents = indents[:len(indents)-1]
			}
			indents = append(indents, i)
		}
		depth := len(indents)
		// Compact entries: "- - - x", "? - x".
		for i+1 < len(line) && (line[i] == '-' || line[i] == '?') && (line[i+1] == ' ' || line[i+1] == '\t') {
			depth++
			i += 2
			for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
				i++
			}
		}
		// Flow collections, outside quotes, up to a comment.
		var quote byte
		prev := byte(' ')
	scan:
		for ; i < len(line); i++ {
			c := line[i]
			switch {
			case quote == '"' && c == '\\':
				i++
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case (c == '"' || c == '\'') && strings.IndexByte(" \t,[{:-", prev) >= 0:
				quote = c
			case c == '#' && (prev == ' ' || prev == '\t'):
				break scan
			case c == '[' || c == '{':
				flow++
			case (c == ']' || c == '}') && flow > 0:
				flow--
			}
			if depth+flow > jsonguard.MaxDepth {
				return fmt.Errorf("line %d: must not nest deeper than %d levels", n+1, jsonguard.MaxDepth)
			}
			prev = c
		}
		if depth+flow > jsonguard.MaxDepth {
			return fmt.Errorf("line %d: must not nest deeper than %d levels", n+1, jsonguard.MaxDepth)
		}
	}
	return nil
}

// readTeamsFile is LoadTeams' reading and parsing.
func readTeamsFile(path string) (Teams, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ts, err := parseTeams(b)
	if err != nil {
		return nil, fmt.Errorf("teams file %s: %w", path, err)
	}
	return ts, nil
}
