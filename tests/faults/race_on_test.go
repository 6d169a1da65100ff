//go:build faults && race

package faults

// raceEnabled: the child processes are built with the race detector too.
const raceEnabled = true
