package handlers

import (
	"net/http"
	"strings"
)

// decodeUnreservedEscapes makes a path whose unreserved characters are percent-encoded
// (`/dags/d%31`, `/backfills/%31`) the path it is equivalent to (`/dags/d1`, `/backfills/1`):
// RFC 3986 §6.2.2.2 says such URIs are the same resource, and clients that encode more than
// they must send them. Without it the router and the validator read the escaped form of a
// path parameter (net/http keeps it in URL.RawPath when it differs from the default
// encoding), and a valid DAG id or backfill id answered 400. Escapes of reserved characters
// (`%2F`, `%3A`) are kept: they are what keeps a `/` inside a segment.
func decodeUnreservedEscapes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawPath != "" {
			if raw, changed := unescapeUnreserved(r.URL.RawPath); changed {
				u := *r.URL
				if strings.IndexByte(raw, '%') < 0 {
					raw = "" // URL.Path is already the whole path, decoded
				}
				u.RawPath = raw
				r2 := *r
				r2.URL = &u
				r = &r2
			}
		}
		next.ServeHTTP(w, r)
	})
}

// unescapeUnreserved decodes the escapes of unreserved characters (ALPHA, DIGIT, "-", ".",
// "_", "~") in an escaped path and keeps every other escape as it is.
func unescapeUnreserved(escaped string) (string, bool) {
	var b strings.Builder
	changed := false
	for i := 0; i < len(escaped); i++ {
		c := escaped[i]
		if c == '%' && i+2 < len(escaped) {
			hi, okHi := unhex(escaped[i+1])
			lo, okLo := unhex(escaped[i+2])
			if d := hi<<4 | lo; okHi && okLo && isUnreserved(d) {
				if !changed {
					b.Grow(len(escaped))
					b.WriteString(escaped[:i])
					changed = true
				}
				b.WriteByte(d)
				i += 2
				continue
			}
		}
		if changed {
			b.WriteByte(c)
		}
	}
	if !changed {
		return escaped, false
	}
	return b.String(), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
