package domain

import "strings"

// TeamRule is what a team name must be (submissions and the teams file).
const TeamRule = "must be 1–64 characters without spaces, '.', ':', '*' or '>'"

// ValidTeam reports whether name is a valid team name (TeamRule): it is
// one token of a NATS subject and of the teams file.
func ValidTeam(name string) bool {
	return name != "" && len(name) <= 64 && !strings.ContainsAny(name, ".*>: \t\r\n")
}
