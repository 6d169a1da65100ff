package webhooks

import "time"

// Defaults of Config, exported so that the service's configuration reuses them.
const (
	DefaultInterval    = 500 * time.Millisecond
	DefaultConcurrency = 4
	DefaultMaxInFlight = 256
	// DefaultTimeout is the contract's bound on one attempt.
	DefaultTimeout = 10 * time.Second
	// DefaultLeaseMargin is added to Timeout for the default Lease.
	DefaultLeaseMargin   = 5 * time.Second
	DefaultPurgeInterval = 2 * time.Second
	DefaultPurgeBatch    = 2000
)
