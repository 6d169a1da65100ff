//go:build benchnoevents

package repo

// The floor of the benchmark of event writers (cmd/bench, P9): the same service, whose PATCH
// runs the same statement without its event. Built only with -tags benchnoevents by the
// benchmark; never shipped.
func init() { patchWritesEvent = false }
