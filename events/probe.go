package events

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"time"
)

// A LISTEN that PostgreSQL accepted is not proof that notifications will come. Behind a
// transaction pooler (PgBouncer in transaction mode) LISTEN runs on whichever server
// connection the pooler lends for that one statement, succeeds, and the connection goes back
// to the pool: notifications then reach other clients or nobody. So the hub trusts its
// listener only after a notification it sent itself, on a channel of its own, came back on it;
// until then, and whenever the proof lapses, it polls the outbox every FallbackPollInterval.

// probeEvery is how often a proven listener is proved again: a session that the pooler or a
// failover took away without a word is found within this period.
const probeEvery = 30 * time.Second

// probeTimeout bounds sending one probe notification.
const probeTimeout = 2 * time.Second

// prober sends the probe notifications, over its own connection (one at most, opened only
// while the hub has a listener).
type prober struct {
	db      *sql.DB
	channel string
	sent    string // payload of the probe awaited; "" when none is
}

func newProber(dsn string) (*prober, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	// The connection is used twice a minute at most: let it go between probes rather than
	// keep a pooler's or a server's connection for nothing.
	db.SetMaxIdleConns(0)
	return &prober{db: db, channel: Channel + "_probe_" + randomHex(8)}, nil
}

// send notifies the probe channel with a fresh payload and remembers it.
func (p *prober) send(ctx context.Context) error {
	p.sent = randomHex(8)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := p.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, p.channel, p.sent)
	return err
}

// answered reports whether n is the awaited probe coming back.
func (p *prober) answered(channel, payload string) bool {
	if channel != p.channel || payload == "" || payload != p.sent {
		return false
	}
	p.sent = ""
	return true
}

func (p *prober) close() { _ = p.db.Close() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
