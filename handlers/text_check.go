package handlers

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/api"
)

// checkText answers 400 for the first string (or key) of a JSON body that PostgreSQL could not
// store as it was sent: invalid UTF-8, a lone UTF-16 surrogate escape ("\ud800"), or the NUL
// character ("\u0000"). encoding/json decodes the first two into U+FFFD without a word, so a
// decoded value cannot tell; the raw bytes of each string can. Left to the database, jsonb
// refuses all three (a 500 for a conf), and text columns would store U+FFFD in place of what
// the client sent. Every body goes through here, the dry run's included.
func checkText(data []byte) *api.Problem {
	// The common body: valid UTF-8 and no \u escape at all costs two scans.
	if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) {
		return nil
	}
	field, msg, ok := findBadText(data)
	if !ok {
		return nil
	}
	// The detail says what is wrong; the field's message adds which escape, as the NUL check
	// before this one did.
	detail, _, _ := strings.Cut(msg, " (")
	p := badRequest(field+" "+detail, fieldErr(field, msg))
	return &p
}

// textFrame is one open object or array on the way to a string.
type textFrame struct {
	object    bool
	key       string // object: the current member's key
	expectKey bool
	index     int // array: the current element's index
}

// findBadText walks a body that decodes as JSON, with the decoder's offsets to cut out each
// string's raw bytes, and names the first bad one by its path ("conf.a.0"; "body" for the
// body itself), as the decode's own errors do.
func findBadText(data []byte) (field, msg string, bad bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []textFrame
	path := func(last string) string {
		parts := make([]string, 0, len(stack)+1)
		for _, f := range stack {
			if f.object {
				if !f.expectKey {
					parts = append(parts, f.key)
				}
			} else {
				parts = append(parts, strconv.Itoa(f.index))
			}
		}
		if last != "" {
			parts = append(parts, last)
		}
		if len(parts) == 0 {
			return "body"
		}
		return strings.Join(parts, ".")
	}
	advance := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		if top.object {
			top.expectKey = true
		} else {
			top.index++
		}
	}
	prev := dec.InputOffset()
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "", false
		}
		end := dec.InputOffset()
		raw := data[prev:end]
		prev = end
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, textFrame{object: true, expectKey: true})
			case '[':
				stack = append(stack, textFrame{})
			default:
				stack = stack[:len(stack)-1]
				advance()
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				if msg, bad := badString(raw); bad {
					return path(t), msg, true
				}
				stack[n-1].key, stack[n-1].expectKey = t, false
				continue
			}
			if msg, bad := badString(raw); bad {
				return path(""), msg, true
			}
			advance()
		default:
			advance()
		}
	}
}

// badString looks at the raw bytes of one JSON string token (with the separators and blanks
// before it, and its quotes).
func badString(raw []byte) (string, bool) {
	first, last := bytes.IndexByte(raw, '"'), bytes.LastIndexByte(raw, '"')
	if first < 0 || last <= first {
		return "", false
	}
	s := raw[first+1 : last]
	if !utf8.Valid(s) {
		return "must be valid UTF-8", true
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			continue
		}
		if s[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash: skip it
			continue
		}
		r, ok := hex4(s, i+2)
		if !ok {
			return "", false
		}
		switch {
		case r == 0:
			return "must not contain the NUL character (\\u0000)", true
		case r >= 0xDC00 && r <= 0xDFFF:
			return "must not contain a lone UTF-16 surrogate escape (\\udc00-\\udfff without a high surrogate before it)", true
		case r >= 0xD800 && r <= 0xDBFF:
			next, ok := -1, false
			if i+11 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				next, ok = hex4(s, i+8)
			}
			if !ok || next < 0xDC00 || next > 0xDFFF {
				return "must not contain a lone UTF-16 surrogate escape (\\ud800-\\udbff without a low surrogate after it)", true
			}
			i += 11
		default:
			i += 5
		}
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape at s[at:].
func hex4(s []byte, at int) (int, bool) {
	if at+4 > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s[at:at+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return int(v), true
}

// checkParamText answers 400 for a path or query parameter that is not valid UTF-8 or holds
// NUL (%ff, %00): the spec's patterns read an invalid byte as U+FFFD and let it through, and
// PostgreSQL refuses it (a 500 for a run_id). A JSON escape cannot occur here, so only the
// bytes are at stake.
func checkParamText(pathParams map[string]string, query url.Values) *api.Problem {
	bad := func(v string) bool {
		if strings.Contains(v, "%") {
			if u, err := url.PathUnescape(v); err == nil {
				v = u
			}
		}
		return !utf8.ValidString(v) || strings.ContainsRune(v, 0)
	}
	var errs []api.FieldError
	for _, name := range slices.Sorted(maps.Keys(pathParams)) {
		if bad(pathParams[name]) {
			errs = append(errs, fieldErr(name, "must be valid UTF-8 without NUL"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(query)) {
		field := name
		if bad(name) {
			field = "query"
		}
		if field == "query" || slices.ContainsFunc(query[name], bad) {
			errs = append(errs, fieldErr(field, "must be valid UTF-8 without NUL"))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	p := badRequest(summarize(errs), errs...)
	return &p
}
