package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/backfillsvc/backfill/api"
)

// maxJSONDepth is how deeply objects and arrays may nest in a request body. No field of the
// API needs more than a few levels; a conf of a thousand nested arrays only costs the decoders
// (and jsonb) stack and time.
const maxJSONDepth = 64

// strictJSON refuses what encoding/json accepts silently: a key repeated in one object (the
// last one wins, so {"dag_id":"a","dag_id":"b"} once created a backfill of b while the client's
// own reading said a; I-JSON, RFC 7493, forbids duplicates) and nesting deeper than
// maxJSONDepth. It walks the tokens once, before any decode. A body that is not valid JSON is
// left to the decoder, whose error names the line and column.
func strictJSON(data []byte) *api.Problem {
	field, msg := strictJSONError(data)
	if field == "" {
		return nil
	}
	p := badRequest(field+" "+msg, fieldErr(field, msg))
	return &p
}

// jsonFrame is one open object or array of the walk.
type jsonFrame struct {
	path   string
	object bool
	keys   map[string]struct{} // objects: the keys seen so far
	key    string              // objects: the key whose value comes next, once want is false
	want   bool                // objects: true when the next string is a key
	index  int                 // arrays: the index of the next element
}

// child is the path of the value that comes next in f.
func (f *jsonFrame) child() string {
	var name string
	if f.object {
		name = f.key
	} else {
		name = strconv.Itoa(f.index)
	}
	if f.path == "body" {
		return name
	}
	return f.path + "." + name
}

// strictJSONError returns the path of the first duplicate key or over-deep value and what is
// wrong there, or "" when the body passes (or is not JSON at all).
func strictJSONError(data []byte) (field, msg string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // a number like 1e400 is the decoder's to judge, not the walk's
	var stack []*jsonFrame
	// valueDone records that a complete value was read in the innermost frame.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.want = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", "" // io.EOF after the value, or a syntax error the decoder will report
		}
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.want {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				valueDone()
				if len(stack) == 0 {
					return "", ""
				}
				continue
			}
			key, ok := tok.(string)
			if !ok {
				return "", ""
			}
			top.key, top.want = key, false
			if _, dup := top.keys[key]; dup {
				return top.child(), fmt.Sprintf("appears more than once in the same object (key %q): send each key once", key)
			}
			top.keys[key] = struct{}{}
			continue
		}
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '{' || d == '['):
			path := "body"
			if top != nil {
				path = top.child()
			}
			if len(stack) >= maxJSONDepth {
				return path, fmt.Sprintf("is nested more than %d levels deep", maxJSONDepth)
			}
			stack = append(stack, &jsonFrame{path: path, object: d == '{', keys: map[string]struct{}{}, want: true})
		case isDelim: // ']' (a '}' was handled with the keys)
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
		if len(stack) == 0 {
			return "", "" // one top-level value read; trailing data is the decoder's to report
		}
	}
}
