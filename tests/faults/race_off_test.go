//go:build faults && !race

package faults

// raceEnabled: the child processes are built without the race detector.
const raceEnabled = false
