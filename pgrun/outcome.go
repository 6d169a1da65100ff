package pgrun

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/backfillsvc/backfill/tracing"
	"github.com/lib/pq"
	"go.opentelemetry.io/otel/trace"
)

// outcomeUnknownError is what a statement or COMMIT that may have reached the server returns
// in place of driver.ErrBadConn. It must not match driver.ErrBadConn: database/sql runs a
// statement again on another session whenever the driver's error matches it, and that is the
// silent second run this type exists to stop.
type outcomeUnknownError struct{ op string }

func (e *outcomeUnknownError) Error() string {
	return e.op + ": " + ErrOutcomeUnknown.Error()
}

func (e *outcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// commitNotSentError: COMMIT failed before a byte of it left, so the server rolls the
// transaction back when it sees the session end. Running the transaction again is safe.
type commitNotSentError struct{ err error }

func (e *commitNotSentError) Error() string { return "commit not sent: " + e.err.Error() }
func (e *commitNotSentError) Unwrap() error { return e.err }

// lib/pq reports driver.ErrBadConn in two different situations: when nothing of the request
// was written (the session was already broken, or the write failed with 0 bytes), which is
// the case database/sql's retry was made for; and when the answer was lost after the request
// was written (EOF, a reset, a FATAL error while reading), when the server may well have
// carried it out. Only the count of bytes written to the socket tells the two apart, so the
// connector dials through countingConn and each session compares the count before and after
// every statement.

// countingConn counts the bytes written to a database socket.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// dialSlot receives, during one Connect, the socket lib/pq dialed for the session.
type dialSlot struct{ conn *countingConn }

type dialSlotKey struct{}

// countingDialer is lib/pq's Dialer with every socket counted. A socket dialed without a slot
// in its context (lib/pq's cancel requests) is not a session's and is not wrapped; with
// noCancelRequests it is not dialed at all (ConnectorBehindPooler).
type countingDialer struct {
	d                net.Dialer
	noCancelRequests bool
}

// errNoCancelRequests refuses lib/pq's dial for a cancel request behind a transaction pooler;
// lib/pq ignores the failure, and the statement runs to its end (or statement_timeout).
var errNoCancelRequests = errors.New("no cancel requests through a transaction pooler")

func (d *countingDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

func (d *countingDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d *countingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	slot, _ := ctx.Value(dialSlotKey{}).(*dialSlot)
	if slot == nil && d.noCancelRequests {
		return nil, errNoCancelRequests
	}
	c, err := d.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if slot == nil {
		return c, nil
	}
	cc := &countingConn{Conn: c}
	slot.conn = cc
	return cc, nil
}

// countSockets makes a lib/pq connector dial through countingDialer. Other connectors (test
// doubles) are left as they are; their sessions then treat every lost answer to a write as
// an unknown outcome, which is never wrong, only less often retried.
func countSockets(c driver.Connector, noCancelRequests bool) {
	if pc, ok := c.(*pq.Connector); ok {
		pc.Dialer(&countingDialer{noCancelRequests: noCancelRequests})
	}
}

// session wraps one driver session so that no write can be sent twice without its caller
// knowing.
type session struct {
	driver.Conn
	sock *countingConn // nil when the connector was not lib/pq's
	inTx bool          // a transaction is open: its statements cannot commit on their own
	// txSpan is the open transaction's span when tracing records it (nil otherwise): the
	// parent of its statements' spans, whose contexts are their callers' and lack it.
	txSpan trace.Span
}

func newSession(c driver.Conn, slot *dialSlot) *session {
	return &session{Conn: c, sock: slot.conn}
}

// written is the count of bytes sent on the session so far (-1 when not counted).
func (s *session) written() int64 {
	if s.sock == nil {
		return -1
	}
	return s.sock.written.Load()
}

// sentSince reports whether anything was written since the count before (always true when
// not counted: assume the worst).
func (s *session) sentSince(before int64) bool {
	return before < 0 || s.written() != before
}

// classify turns a lost answer to an autocommit write into ErrOutcomeUnknown. Left alone:
// every other error; a failure before anything was sent (database/sql may run the statement
// on another session); a statement inside a transaction (it commits only with COMMIT, and
// RunTx runs a transaction lost before COMMIT again whole); and a read, which may run twice.
func (s *session) classify(op, query string, before int64, err error) error {
	if err == nil || !lostAnswer(err) || s.inTx || !s.sentSince(before) || isRead(query) {
		return err
	}
	return &outcomeUnknownError{op: op}
}

// lostAnswer reports whether err means the session died under a request: lib/pq's
// driver.ErrBadConn (EOF, a FATAL error), or a network error it passes on as it is (a reset
// while reading the answer is a *net.OpError, not ErrBadConn). An error the server answered
// with (a constraint, a read-only host) says what happened and is not one.
func lostAnswer(err error) bool {
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || errors.As(err, &netErr)
}

// isRead reports whether a statement only reads: its first keyword is SELECT, SHOW or
// VALUES. This code base calls no writing function from an autocommit SELECT (the one that
// writes WAL, durableMark, runs inside a transaction); a WITH, which may hold an UPDATE, counts
// as a write.
func isRead(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	for strings.HasPrefix(q, "--") {
		_, rest, _ := strings.Cut(q, "\n")
		q = strings.TrimLeft(rest, " \t\r\n(")
	}
	word, _, _ := strings.Cut(q, " ")
	word, _, _ = strings.Cut(word, "\n")
	switch strings.ToUpper(strings.TrimSpace(word)) {
	case "SELECT", "SHOW", "VALUES":
		return true
	}
	return false
}

func (s *session) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	span := tracing.Statement(ctx, s.txSpan, query)
	before := s.written()
	res, err := s.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	err = s.classify("exec", query, before, err)
	tracing.EndStatement(span, err)
	return res, err
}

func (s *session) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	span := tracing.Statement(ctx, s.txSpan, query)
	before := s.written()
	rows, err := s.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if err != nil {
		err = s.classify("query", query, before, err)
		tracing.EndStatement(span, err)
		return nil, err
	}
	tracing.EndStatement(span, nil)
	return s.wrapRows(rows, query), nil
}

// wrapRows: an autocommit write's answer (UPDATE ... RETURNING) can be lost while its rows are
// read, after the server committed.
func (s *session) wrapRows(rows driver.Rows, query string) driver.Rows {
	if s.inTx || isRead(query) {
		return rows
	}
	return &writeRows{Rows: rows, s: s}
}

func (s *session) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	// Preparing runs nothing: database/sql may prepare again on another session.
	st, err := s.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: st, s: s, query: query, op: tracedOperation(query)}, nil
}

func (s *session) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	// A failed BEGIN leaves nothing behind: database/sql and RunTx may begin again.
	tx, err := s.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	s.inTx = true
	s.txSpan = tracing.Recording(ctx)
	return &sessionTx{Tx: tx, s: s}, nil
}

func (s *session) Ping(ctx context.Context) error {
	return s.Conn.(driver.Pinger).Ping(ctx)
}

// ResetSession runs before database/sql hands a pooled session out again. Besides lib/pq's own
// check it looks at the socket: a server that restarted or ended an idle session has closed
// it (or sent a FATAL error on it), and a statement written there would have its bytes
// accepted by the kernel and its answer lost, an unknown outcome for what never arrived.
// Found dead here, nothing has been sent: database/sql takes another session. A read that is
// sent again when its session is lost (Read) skips the look.
func (s *session) ResetSession(ctx context.Context) error {
	if err := s.Conn.(driver.SessionResetter).ResetSession(ctx); err != nil {
		return err
	}
	if s.sock != nil && ctx.Value(resentIfLostKey{}) == nil && !s.sock.idleAlive() {
		return driver.ErrBadConn
	}
	return nil
}

func (s *session) IsValid() bool { return s.Conn.(driver.Validator).IsValid() }

func (s *session) CheckNamedValue(nv *driver.NamedValue) error {
	return s.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// sessionTx marks the session as in a transaction until COMMIT or ROLLBACK.
type sessionTx struct {
	driver.Tx
	s *session
}

func (t *sessionTx) Commit() (err error) {
	span := tracing.Statement(context.Background(), t.s.txSpan, "COMMIT")
	defer func() { tracing.EndStatement(span, err) }()
	before := t.s.written()
	err = t.Tx.Commit()
	t.s.inTx, t.s.txSpan = false, nil
	if err == nil || !lostAnswer(err) {
		return err
	}
	if !t.s.sentSince(before) {
		return &commitNotSentError{err}
	}
	return &outcomeUnknownError{op: "commit"}
}

func (t *sessionTx) Rollback() error {
	t.s.inTx, t.s.txSpan = false, nil
	return t.Tx.Rollback()
}

// stmt is a prepared statement of a session, classified like the session's own statements.
type stmt struct {
	driver.Stmt
	s     *session
	query string
	op    string // its span's name; "" for none (tracedOperation)
}

// tracedOperation names a prepared statement's spans. COPY FROM STDIN has none: its
// statement is executed once per row sent, and a 100,000-run create would make as many spans.
func tracedOperation(query string) string {
	if op := tracing.SQLOperation(query); op != "COPY" {
		return op
	}
	return ""
}

// ExecContext and QueryContext fall back to the context-free methods for the statements that
// lack them: lib/pq's COPY FROM STDIN statement (pq.CopyIn) implements only Exec and Query.
// database/sql would do the same for an unwrapped statement, so the wrapper must too.
func (st *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (res driver.Result, err error) {
	span := tracing.StatementOp(ctx, st.s.txSpan, st.op)
	defer func() { tracing.EndStatement(span, err) }()
	before := st.s.written()
	if ec, ok := st.Stmt.(driver.StmtExecContext); ok {
		res, err = ec.ExecContext(ctx, args)
	} else if err = ctx.Err(); err == nil {
		//lint:ignore SA1019 the context-free Exec is all that lib/pq's COPY statement has
		res, err = st.Stmt.Exec(plainValues(args))
	}
	err = st.s.classify("exec", st.query, before, err)
	return res, err
}

func (st *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (rows driver.Rows, err error) {
	span := tracing.StatementOp(ctx, st.s.txSpan, st.op)
	defer func() { tracing.EndStatement(span, err) }()
	before := st.s.written()
	if qc, ok := st.Stmt.(driver.StmtQueryContext); ok {
		rows, err = qc.QueryContext(ctx, args)
	} else if err = ctx.Err(); err == nil {
		//lint:ignore SA1019 the context-free Query is all that lib/pq's COPY statement has
		rows, err = st.Stmt.Query(plainValues(args))
	}
	if err != nil {
		return nil, st.s.classify("query", st.query, before, err)
	}
	return st.s.wrapRows(rows, st.query), nil
}

// writeRows reports a lost answer while reading a write's rows as ErrOutcomeUnknown.
// database/sql does not run a query again once it has returned rows, so this only names the
// outcome: it keeps the caller's retry rules (a session failure before COMMIT is retried) from
// taking it for a failure that changed nothing.
type writeRows struct {
	driver.Rows
	s *session
}

func (r *writeRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && err != io.EOF && lostAnswer(err) {
		return &outcomeUnknownError{op: "read result"}
	}
	return err
}

// Close reads what is left of the answer (database/sql's Row.Scan reports its error), so it
// can meet the lost answer too.
func (r *writeRows) Close() error {
	err := r.Rows.Close()
	if err != nil && lostAnswer(err) {
		return &outcomeUnknownError{op: "read result"}
	}
	return err
}

// plainValues drops the names and ordinals of positional arguments, for the context-free
// statement methods (database/sql's own fallback does the same; named arguments never reach
// here, lib/pq rejects them earlier in CheckNamedValue).
func plainValues(named []driver.NamedValue) []driver.Value {
	vals := make([]driver.Value, len(named))
	for i, nv := range named {
		vals[i] = nv.Value
	}
	return vals
}
