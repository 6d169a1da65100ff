package pgproxy

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// AnswerLostAfterWrite cuts a connection when the server's ReadyForQuery 'I' (idle: nothing
// left open, so the change is committed) ends an autocommit statement or a transaction that
// changed rows, before the client receives it: the change is durable and the client never
// hears so. "Changed rows" is a CommandComplete tag that says so (IsChangeTag over
// Event.TxTags), or, for a statement whose tag hides it (WITH x AS (UPDATE ...) SELECT ...
// answers "SELECT n"), an INSERT, UPDATE, DELETE or MERGE in its text (however many rows it
// changed: the tag does not say). A read, a transaction
// that changed nothing and a statement inside a still open transaction pass. The client has
// already received everything before the ReadyForQuery (its rows and tag), but lib/pq waits
// for the ReadyForQuery: it sees the connection die.
func AnswerLostAfterWrite() Rule {
	return AnswerLostAfter(func(ev Event) bool {
		for _, tag := range ev.TxTags {
			if IsChangeTag(tag) {
				return true
			}
		}
		n := len(ev.TxTags)
		return n > 0 && strings.HasPrefix(ev.TxTags[n-1], "SELECT") && writesByText.MatchString(ev.SQL)
	})
}

var writesByText = regexp.MustCompile(`(?i)\b(INSERT\s+INTO|UPDATE\s+\S+\s+(\S+\s+)?SET|DELETE\s+FROM|MERGE\s+INTO)\b`)

// AnswerLostAfter is AnswerLostAfterWrite for the exchanges that match says: it cuts before
// the server's ReadyForQuery 'I' of an exchange that match accepts.
func AnswerLostAfter(match func(Event) bool) Rule {
	return func(ev Event) Action {
		if ev.Dir == FromServer && ev.Type == 'Z' && ev.TxStatus == 'I' && match(ev) {
			return CutBefore
		}
		return Forward
	}
}

// AtCommit acts on a COMMIT from the client: a simple query 'Q' whose text is COMMIT (or END),
// or the Execute 'E' of a prepared COMMIT. CutBefore and Reset mean the server never saw it
// (the transaction rolls back); CutAfter means it was sent and its answer never comes back.
func AtCommit(a Action) Rule {
	return func(ev Event) Action {
		if ev.Dir != FromClient || (ev.Type != 'Q' && ev.Type != 'E') {
			return Forward
		}
		if isCommit(ev.SQL) {
			return a
		}
		return Forward
	}
}

func isCommit(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sql), ";")))
	return s == "COMMIT" || s == "END" || s == "COMMIT TRANSACTION" || s == "COMMIT WORK"
}

// AfterRows cuts a connection in the middle of a result: before the server's (n+1)th DataRow of
// one exchange, so that the client has received exactly n rows.
func AfterRows(n int) Rule {
	return func(ev Event) Action {
		if ev.Dir == FromServer && ev.Type == 'D' && ev.Rows > n {
			return CutBefore
		}
		return Forward
	}
}

// OnSQL applies rule only to the messages of exchanges whose statement text contains substr
// (case-insensitive); every other message is forwarded.
func OnSQL(substr string, rule Rule) Rule {
	substr = strings.ToLower(substr)
	return func(ev Event) Action {
		if !strings.Contains(strings.ToLower(ev.SQL), substr) {
			return Forward
		}
		return rule(ev)
	}
}

// Once lets rule act on one message only, across every connection: after its first answer
// other than Forward, everything is forwarded.
func Once(rule Rule) Rule { return Times(1, rule) }

// Times lets rule act on n messages at most, across every connection.
func Times(n int, rule Rule) Rule {
	var left atomic.Int64
	left.Store(int64(n))
	return func(ev Event) Action {
		if left.Load() <= 0 {
			return Forward
		}
		a := rule(ev)
		if a == Forward {
			return Forward
		}
		if left.Add(-1) < 0 {
			return Forward
		}
		return a
	}
}

// Chaos is a seeded random rule: at each point where a connection's death matters — a
// client's query or Execute, a server's CommandComplete or ReadyForQuery — it acts with
// probability p, with an action drawn from actions (CutBefore, CutAfter and Reset when none
// are given). The same seed and the same sequence of messages give the same faults; with
// several connections the interleaving is the scheduler's, so print the seed and compare
// outcomes, not message numbers.
func Chaos(seed uint64, p float64, actions ...Action) Rule {
	if len(actions) == 0 {
		actions = []Action{CutBefore, CutAfter, Reset}
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(ev Event) Action {
		switch {
		case ev.Dir == FromClient && (ev.Type == 'Q' || ev.Type == 'E'),
			ev.Dir == FromServer && (ev.Type == 'C' || ev.Type == 'Z'):
		default:
			return Forward
		}
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() >= p {
			return Forward
		}
		return actions[rng.IntN(len(actions))]
	}
}
