//go:build !race

package submitter

// raceEnabled: the race detector is on (its runs scale down the largest
// tests).
const raceEnabled = false
