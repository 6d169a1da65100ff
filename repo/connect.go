package repo

import (
	"context"
	"database/sql/driver"
)

// Connector wraps the driver's connector so that every failure to open a session is marked
// as one. Such a failure sent no statement, so the request is safe to run again, and it
// means the database cannot be reached: lib/pq reports "no host is writable"
// (target_session_attrs) and a refused or half-open host as plain errors with no SQLSTATE,
// which the mark lets IsUnavailable recognise without reading error text.
func Connector(c driver.Connector) driver.Connector { return connector{c} }

type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, &connectError{err: err}
	}
	return conn, nil
}

// connectError is a failure to open a session.
type connectError struct{ err error }

func (e *connectError) Error() string { return "connect: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }
