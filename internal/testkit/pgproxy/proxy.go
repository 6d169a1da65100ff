// Package pgproxy is a fault-injecting TCP proxy for the PostgreSQL wire protocol, for tests.
//
// It sits between a client (the service's pool, psql, a test) and a real PostgreSQL server,
// reads the protocol's message frames in both directions (after the startup packet every
// message is a type byte and an int32 length that counts itself), and asks a Rule, for every
// message, what to do with it: forward it, cut the connection before or after it, reset it, or
// hang. The point is to reproduce what a dying network does at exactly the instant that
// matters, for example "the server committed, the client never heard":
//
//	p := pgproxy.Start(t, "127.0.0.1:5432")
//	dsn := p.DSN(t, realDSN)                       // the same DSN, through the proxy
//	p.SetRule(pgproxy.Once(pgproxy.AnswerLostAfterWrite()))
//	// ... the next INSERT/UPDATE/DELETE/COMMIT commits, and its client sees the connection die.
//	require.Equal(t, 1, p.Fired())
//
// The proxy answers an SSLRequest or GSSENCRequest with 'N' itself (so use sslmode=disable
// or prefer), and forwards a CancelRequest as is. Rules run on the proxy's goroutines, one
// message at a time per connection; they must be safe for use by several connections at once
// (the helpers here are).
package pgproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Direction says who sent a message.
type Direction int

// The two directions of a connection.
const (
	FromClient Direction = iota
	FromServer
)

func (d Direction) String() string {
	if d == FromClient {
		return "client"
	}
	return "server"
}

// Action is what a Rule asks the proxy to do with a message.
type Action int

const (
	// Forward passes the message on.
	Forward Action = iota
	// CutBefore closes both sides without passing the message on: the client sees EOF.
	CutBefore
	// CutAfter passes the message on, then closes both sides.
	CutAfter
	// Reset closes both sides with a TCP reset (SO_LINGER 0) without passing the message on:
	// the client sees ECONNRESET.
	Reset
	// Hang stops forwarding in both directions and keeps both sockets open until the proxy is
	// closed: the client waits for an answer that never comes (until its own timeout).
	Hang
)

func (a Action) String() string {
	return [...]string{"forward", "cut-before", "cut-after", "reset", "hang"}[a]
}

// Event is one message seen by the proxy, with what it knows of the exchange around it.
type Event struct {
	// Conn numbers the proxied connections from 1, in the order they were accepted.
	Conn int64
	// Dir is who sent the message.
	Dir Direction
	// Type is the message's type byte ('Q', 'P', 'B', 'E', 'S' from the client; 'C', 'D',
	// 'Z', 'E', 'T' ... from the server). The startup packet, which has none, is never shown.
	Type byte
	// Body is the message's payload after its length. Valid only during the Rule's call.
	Body []byte
	// SQL is the statement text of the exchange the message belongs to: the text of a simple
	// query ('Q'), or of the prepared statement that a Bind names (by statement name, so a
	// statement parsed once and executed many times is still named). Empty when unknown.
	SQL string
	// Tags are the CommandComplete tags ("INSERT 0 1", "UPDATE 3", "COMMIT") the server has
	// sent since its last ReadyForQuery, this message's own included.
	Tags []string
	// TxTags are the CommandComplete tags since the server last said it was idle
	// (ReadyForQuery 'I'): a whole transaction's, BEGIN to COMMIT, or one autocommit
	// statement's. With TxStatus 'I' they are what has just been committed or rolled back.
	TxTags []string
	// Rows counts the DataRows the server has sent since its last ReadyForQuery, this one
	// included.
	Rows int
	// TxStatus is the transaction status of a ReadyForQuery ('I' idle, 'T' in a transaction,
	// 'E' in a failed one); 0 for other messages.
	TxStatus byte
}

// Rule decides what happens to each message. A nil Rule forwards everything.
type Rule func(Event) Action

// Proxy is a listening proxy to one upstream server.
type Proxy struct {
	upstream string
	ln       net.Listener
	rule     atomic.Pointer[Rule]
	fired    atomic.Int64
	nextConn atomic.Int64
	closed   chan struct{}

	mu    sync.Mutex
	conns map[*pconn]struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// Start listens on 127.0.0.1:0, forwards to upstream (host:port) and closes at the end of the
// test.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := Listen(upstream)
	if err != nil {
		t.Fatalf("pgproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Listen is Start without a test: the caller closes the proxy.
func Listen(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, closed: make(chan struct{}), conns: map[*pconn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DSN returns dsn (a postgres:// URL) with its host and port replaced by the proxy's.
func (p *Proxy) DSN(t testing.TB, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("pgproxy: parse DSN: %v", err)
	}
	u.Host = p.Addr()
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// SetRule replaces the rule for every message from now on, on every connection; nil forwards
// everything.
func (p *Proxy) SetRule(r Rule) {
	if r == nil {
		p.rule.Store(nil)
		return
	}
	p.rule.Store(&r)
}

// Fired counts the messages for which a rule answered anything but Forward.
func (p *Proxy) Fired() int { return int(p.fired.Load()) }

// CutAll closes every open proxied connection now, as a server restart would; new ones are
// still accepted.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.close(false)
	}
}

// Close stops listening, closes every proxied connection (hung ones too) and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.closed)
		err = p.ln.Close()
		p.CutAll()
		p.wg.Wait()
	})
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(client)
		}()
	}
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &pconn{p: p, id: p.nextConn.Add(1), client: client, server: server, stmts: map[string]string{}, done: make(chan struct{})}
	p.mu.Lock()
	select {
	case <-p.closed:
		p.mu.Unlock()
		c.close(false)
		return
	default:
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close(false)
	}()
	if !c.startup() {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.pump(FromServer, server, client)
	}()
	c.pump(FromClient, client, server)
	<-done
}

// pconn is one proxied connection and what the proxy tracks of its exchange.
type pconn struct {
	p              *Proxy
	id             int64
	client, server net.Conn

	mu     sync.Mutex
	stmts  map[string]string // prepared statement name -> SQL ("" is the unnamed one)
	sql    string
	tags   []string
	txTags []string
	rows   int
	hung   bool
	// cutting: one pump passed on its CutAfter message and is closing both sides; the other
	// forwards nothing more.
	cutting bool
	closed  bool
	done    chan struct{} // closed by close: a hung pump stops waiting
}

func (c *pconn) close(reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	if reset {
		for _, nc := range []net.Conn{c.client, c.server} {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
	}
	_ = c.client.Close()
	_ = c.server.Close()
}

// waitClosed blocks a hung connection's pump until the connection or the proxy is closed.
func (c *pconn) waitClosed() {
	select {
	case <-c.done:
	case <-c.p.closed:
	}
}

// Startup request codes that come in place of a startup packet's protocol version.
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
	codeCancelRequest = 80877102
)

// startup forwards the untyped startup packet, answering SSL and GSS encryption requests
// with 'N' (no) itself. It reports whether typed messages follow.
func (c *pconn) startup() bool {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c.client, hdr[:]); err != nil {
			return false
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 1<<20 {
			return false
		}
		rest := make([]byte, n-8)
		if _, err := io.ReadFull(c.client, rest); err != nil {
			return false
		}
		switch binary.BigEndian.Uint32(hdr[4:]) {
		case codeSSLRequest, codeGSSENCRequest:
			if _, err := c.client.Write([]byte{'N'}); err != nil {
				return false
			}
			continue
		case codeCancelRequest:
			// Closed only once the server has closed it, as a TCP proxy does: the server
			// closes after it has signalled the backend, and lib/pq takes that end as the
			// cancel's delivery and hands the session out again. Closing at once let the
			// signal land on the session's next statement (a sweep after the test's own
			// canceled one failed 57014).
			if _, err := c.server.Write(append(hdr[:], rest...)); err == nil {
				_, _ = io.Copy(c.client, c.server)
			}
			return false
		}
		_, err := c.server.Write(append(hdr[:], rest...))
		return err == nil
	}
}

// pump forwards typed messages from src to dst, asking the rule about each.
func (c *pconn) pump(dir Direction, src, dst net.Conn) {
	defer c.close(false)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 || n > 1<<30 {
			return
		}
		msg := make([]byte, 5+n-4)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(src, msg[5:]); err != nil {
			return
		}
		action := c.decide(dir, hdr[0], msg[5:])
		if action != Forward {
			c.p.fired.Add(1)
		}
		switch action {
		case CutBefore:
			return
		case Reset:
			c.close(true)
			return
		case Hang:
			c.mu.Lock()
			c.hung = true
			c.mu.Unlock()
			c.waitClosed()
			return
		}
		c.mu.Lock()
		hung, cutting := c.hung, c.cutting
		if action == CutAfter {
			// Set before the message leaves: its answer, which the other pump may read before
			// this one closes both sides, must not reach the other end.
			c.cutting = true
		}
		c.mu.Unlock()
		if hung {
			c.waitClosed()
			return
		}
		if cutting {
			return // the other direction is cutting the connection after its last message
		}
		if _, err := dst.Write(msg); err != nil {
			return
		}
		if action == CutAfter {
			return
		}
	}
}

// decide updates the exchange's state with one message and asks the rule about it.
func (c *pconn) decide(dir Direction, typ byte, body []byte) Action {
	c.mu.Lock()
	ev := Event{Conn: c.id, Dir: dir, Type: typ, Body: body}
	if dir == FromClient {
		switch typ {
		case 'Q':
			c.sql = cstring(body)
		case 'P':
			name, rest := splitCString(body)
			c.stmts[name] = cstring(rest)
			c.sql = c.stmts[name]
		case 'B':
			_, rest := splitCString(body) // portal
			stmt, _ := splitCString(rest)
			c.sql = c.stmts[stmt]
		case 'C': // Close of a statement ('S') or portal ('P')
			if len(body) > 0 && body[0] == 'S' {
				delete(c.stmts, cstring(body[1:]))
			}
		}
	} else {
		switch typ {
		case 'C':
			c.tags = append(c.tags, cstring(body))
			c.txTags = append(c.txTags, cstring(body))
		case 'D':
			c.rows++
		case 'Z':
			if len(body) > 0 {
				ev.TxStatus = body[0]
			}
		}
	}
	ev.SQL, ev.Tags, ev.Rows = c.sql, append([]string(nil), c.tags...), c.rows
	ev.TxTags = append([]string(nil), c.txTags...)
	if dir == FromServer && typ == 'Z' {
		c.tags, c.rows = c.tags[:0], 0
		if ev.TxStatus == 'I' {
			c.txTags = c.txTags[:0]
		}
	}
	c.mu.Unlock()
	rp := c.p.rule.Load()
	if rp == nil {
		return Forward
	}
	return (*rp)(ev)
}

func splitCString(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

func cstring(b []byte) string {
	s, _ := splitCString(b)
	return s
}

// IsWriteTag reports whether a CommandComplete tag is a change that an autocommit statement
// commits on its own (INSERT, UPDATE, DELETE, MERGE, COPY) or a COMMIT.
func IsWriteTag(tag string) bool {
	verb, _, _ := strings.Cut(tag, " ")
	return verb == "COMMIT" || isChangeVerb(verb)
}

// IsChangeTag reports whether a CommandComplete tag says rows were changed: INSERT, UPDATE,
// DELETE, MERGE or COPY of at least one row ("UPDATE 0" changed nothing).
func IsChangeTag(tag string) bool {
	fields := strings.Fields(tag)
	if len(fields) < 2 || !isChangeVerb(fields[0]) {
		return false
	}
	n, err := strconv.Atoi(fields[len(fields)-1])
	return err == nil && n > 0
}

func isChangeVerb(verb string) bool {
	switch verb {
	case "INSERT", "UPDATE", "DELETE", "MERGE", "COPY":
		return true
	}
	return false
}
