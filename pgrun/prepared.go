package pgrun

import (
	"context"
	"database/sql"
	"sync"

	"github.com/jmoiron/sqlx"
)

// The hot statements (the status read, the claim, the report and release, the heartbeat, the
// reads of events) run many times a second with the same text. Prepared once per pooled
// connection, PostgreSQL parses and plans them once per connection instead of on every call:
// measured on the status read, 58–80 µs of PostgreSQL CPU per read prepared against 177–208 µs
// unnamed (docs/BENCHMARKS.md, P2); on a page of events, 0.16–0.21 ms against 0.95–1.3 ms.
//
// A statement prepared on a connection outlives the transaction that used it, which a
// transaction pooler (PgBouncer in transaction mode before 1.21's max_prepared_statements)
// does not allow: the next transaction may run on another server connection, where the
// statement does not exist. So preparing is a setting (DB_POOLER): on for a direct connection,
// off behind a transaction pooler, where every statement goes unnamed.
//
// A prepared statement's Exec or Query goes through the same session wrapper as any other
// (outcome.go: stmt), so an autocommit write that loses its answer is still ErrOutcomeUnknown
// and database/sql never runs it again; preparing it again on another connection runs nothing.

// preparedStatements prepares each hot statement once per pool and hands out its *sqlx.Stmt,
// which database/sql prepares again on each pooled connection as it first uses it there.
type preparedStatements struct {
	enabled bool
	stmts   sync.Map // preparedKey -> *sqlx.Stmt
}

type preparedKey struct {
	db    *sqlx.DB
	query string
}

// get returns query prepared on db, or nil when preparing is off or fails (a database outage:
// the caller runs the statement unnamed, and the next call tries again).
func (p *preparedStatements) get(ctx context.Context, db *sqlx.DB, query string) *sqlx.Stmt {
	if !p.enabled {
		return nil
	}
	key := preparedKey{db, query}
	if st, ok := p.stmts.Load(key); ok {
		return st.(*sqlx.Stmt)
	}
	// No lock is held while preparing: during an outage a prepare waits for a connection for
	// up to DB_RECONNECT_WAIT, and requests must not queue behind one another for it. Two
	// first requests may both prepare; the second statement is closed.
	st, err := db.PreparexContext(ctx, query)
	if err != nil {
		return nil
	}
	if prev, loaded := p.stmts.LoadOrStore(key, st); loaded {
		_ = st.Close()
		return prev.(*sqlx.Stmt)
	}
	return st
}

// cached returns query's statement if it was already prepared on db, else nil.
func (p *preparedStatements) cached(db *sqlx.DB, query string) *sqlx.Stmt {
	if st, ok := p.stmts.Load(preparedKey{db, query}); ok {
		return st.(*sqlx.Stmt)
	}
	return nil
}

// Hot returns what runs query on q: the statement prepared on the pool ctx names when preparing
// is on, else q itself (the statement then goes unnamed). q is that pool (as an attempt or a
// read is handed it), or a transaction begun on it. The result is used like q, with the same
// query text: sqlx.GetContext(ctx, d.Hot(ctx, q, query), &dst, query, args...).
//
// Inside a transaction the pool's statement must already exist (PrepareHot before BEGIN):
// preparing it on the pool takes a connection of its own, and with every connection of a
// small pool held by such transactions that would wait for ever. The transaction's connection
// then prepares it once for the pool's statement, or reuses it (database/sql's Tx.Stmt).
func (d *DB) Hot(ctx context.Context, q sqlx.QueryerContext, query string) sqlx.QueryerContext {
	db := d.pool(ctx)
	tx, inTx := q.(*sqlx.Tx)
	var st *sqlx.Stmt
	if inTx {
		st = d.prepared.cached(db, query)
	} else {
		st = d.prepared.get(ctx, db, query)
	}
	if st == nil {
		return q
	}
	if inTx {
		st = tx.StmtxContext(ctx, st)
	}
	return preparedQueryer{st}
}

// PrepareHot prepares query on the pool ctx names, outside any transaction, for a transaction
// that runs it through Hot. A failure (an outage) leaves the transaction to send it unnamed.
func (d *DB) PrepareHot(ctx context.Context, query string) {
	d.prepared.get(ctx, d.pool(ctx), query)
}

// preparedQueryer runs its prepared statement whatever query text it is given (always the
// statement's own, see Hot).
type preparedQueryer struct{ st *sqlx.Stmt }

func (p preparedQueryer) QueryContext(ctx context.Context, _ string, args ...any) (*sql.Rows, error) {
	return p.st.QueryContext(ctx, args...)
}

func (p preparedQueryer) QueryxContext(ctx context.Context, _ string, args ...any) (*sqlx.Rows, error) {
	return p.st.QueryxContext(ctx, args...)
}

func (p preparedQueryer) QueryRowxContext(ctx context.Context, _ string, args ...any) *sqlx.Row {
	return p.st.QueryRowxContext(ctx, args...)
}
