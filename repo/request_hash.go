package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// requestHash fingerprints a creation request after defaults are filled in, so that the same
// request sent twice matches whatever its JSON spelling (key order, spacing, time zone of the
// dates). It covers every field of BackfillCreateParams except three:
//
//   - IdempotencyKey, which is what the hash is stored under;
//   - IfMatch, a precondition on the plan rather than part of what is asked for: a request
//     that already created its backfill is answered with it whatever it now expects;
//   - DagRunConf, which is stored beside the hash as jsonb and compared with jsonb's `=`
//     (idempotentReplay). Hashing it in Go would mean deciding number equality in Go:
//     encoding/json into `any` makes 2^53 and 2^53+1 one float64 and cannot read 1e400 at all,
//     and canonicalising through jsonb's text form is not jsonb equality either
//     ('{"n":1.0}'::jsonb::text keeps "1.0" while '{"n":1.0}'::jsonb = '{"n":1}'::jsonb).
//     Only PostgreSQL's own comparison is exactly "the same jsonb value", and it costs no
//     extra round trip: the replay look-up compares in the same SELECT.
//
// The whole struct is hashed rather than a list of its fields, so that a field added to the
// request later is part of the fingerprint without anyone remembering to add it here (a
// forgotten field would replay a different request); TestRequestHashCoversEveryField holds
// that.
func requestHash(p BackfillCreateParams) (fingerprint, error) {
	conf := p.DagRunConf
	p.IdempotencyKey = ""
	p.IfMatch = nil
	p.DagRunConf = nil
	// The same instant in any zone is the same request; Go encodes a time with its zone.
	p.FromDate = p.FromDate.UTC()
	p.ToDate = p.ToDate.UTC()
	canonical, err := json.Marshal(p)
	if err != nil {
		return fingerprint{}, fmt.Errorf("hash request: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return fingerprint{hash: hex.EncodeToString(sum[:]), conf: conf}, nil
}

// fingerprint identifies a creation request under its idempotency key: the hash of its fields
// and its conf, kept as the client's JSON for jsonb to compare.
type fingerprint struct {
	hash string
	conf JSON
}
