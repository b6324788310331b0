//go:build !race

package lab

// raceEnabled: the tests run under the race detector.
const raceEnabled = false
