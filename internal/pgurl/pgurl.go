// Package pgurl reads the URL of a PostgreSQL server that a harness or a tool makes its own
// databases on (the test harness, the bench command), and points it at one of them.
package pgurl

import (
	"errors"
	"net/url"
	"strings"
)

// Server checks that raw is a lib/pq URL (over TCP, or a Unix socket named by its host
// parameter) and fills in the connection settings these tools
// rely on, keeping any the caller chose: no TLS by default (lib/pq defaults to
// sslmode=require, which a local or container server does not offer), UTC sessions so that
// timestamps print the same on every machine, and the postgres database when none is named.
func Server(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// The value is not echoed: a key=value DSN would print its password into CI logs.
		return nil, errors.New("not a lib/pq URL; want one like postgres://user@host:5432/postgres?sslmode=disable")
	}
	q := u.Query()
	// A Unix socket has no host in the authority: lib/pq reads the socket's directory from
	// the host parameter (postgres:///postgres?host=/var/run/postgresql).
	if u.Host == "" && q.Get("host") == "" {
		return nil, errors.New("a lib/pq URL names a host (postgres://user@host:5432/postgres) or a socket directory (postgres:///postgres?host=/var/run/postgresql)")
	}
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	if q.Get("timezone") == "" {
		q.Set("timezone", "UTC")
	}
	u.RawQuery = q.Encode()
	if strings.Trim(u.Path, "/") == "" {
		u.Path = "/postgres"
	}
	return u, nil
}

// Database returns the server URL pointed at database name.
func Database(server *url.URL, name string) string {
	u := *server
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}
