package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Fingerprint identifies a creation request under its idempotency key: the hash of its
// fields and its conf, kept as the client's JSON for PostgreSQL to compare as jsonb.
type Fingerprint struct {
	Hash string
	Conf []byte
}

// RequestHash fingerprints a creation request after defaults are filled in, so that the same
// request sent twice matches whatever its JSON spelling (key order, spacing, time zone of the
// dates). It covers every field of BackfillRequest except three:
//
//   - IdempotencyKey, which is what the hash is stored under;
//   - IfMatch, a precondition on the plan rather than part of what is asked for: a request
//     that already created its backfill is answered with it whatever it now expects;
//   - DagRunConf, which is stored beside the hash as jsonb and compared with jsonb's `=`
//     (repo's idempotentReplay). Hashing it in Go would mean deciding number equality in Go:
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
func RequestHash(req BackfillRequest) (Fingerprint, error) {
	conf := req.DagRunConf
	req.IdempotencyKey = ""
	req.IfMatch = nil
	req.DagRunConf = nil
	// The same instant in any zone is the same request; Go encodes a time with its zone.
	req.FromDate = req.FromDate.UTC()
	req.ToDate = req.ToDate.UTC()
	canonical, err := json.Marshal(req)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("hash request: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return Fingerprint{Hash: hex.EncodeToString(sum[:]), Conf: conf}, nil
}

// RequestFingerprint fingerprints any other creating request (a claim, a webhook, a manual
// run) the way RequestHash does a backfill: the hash of req's JSON, which the caller passes
// with its idempotency key and its conf cleared (and anything the server makes up, such as a
// webhook's secret), and the conf beside it, for PostgreSQL to compare as jsonb. Callers pass
// their whole parameter struct, so that a field added to it later is part of the fingerprint.
func RequestFingerprint(req any, conf []byte) (Fingerprint, error) {
	canonical, err := json.Marshal(req)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("hash request: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return Fingerprint{Hash: hex.EncodeToString(sum[:]), Conf: conf}, nil
}
