package events

import "time"

// Defaults of Config, exported so that the service's configuration reuses them.
const (
	DefaultPollInterval = 2 * time.Second
	// DefaultProgressInterval is the contract's "at most 4 progress messages a second".
	DefaultProgressInterval = 250 * time.Millisecond
	DefaultListenIdle       = 10 * time.Second
	DefaultMaxStreams       = 2000
	DefaultBatch            = 500
)
