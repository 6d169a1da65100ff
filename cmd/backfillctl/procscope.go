package main

import (
	"crypto/rand"
	"encoding/hex"
)

// scopeVar names the environment variable that tags every process of one run: the program
// gets it, and whatever it starts inherits it, even a child that leaves the program's process
// group (setsid). The executor finds the run's processes by it when the run ends.
const scopeVar = "BACKFILL_RUN_SCOPE"

// newScopeToken is a token no other run of any executor on the machine has.
func newScopeToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
