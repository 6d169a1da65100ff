package handlers

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"
)

// An answer's JSON is written from a plan made once per Go type, byte for byte what
// encoding/json writes: encoding/json walks every field through reflect on every call and
// compacts again what time.Time's MarshalJSON returned, which was the largest part of the
// service's own CPU in a status read after the database driver. A plan holds each field's
// offset, its pre-encoded `"name":` and an append function for its kind; a kind it does not
// know (a map, a float, a json.RawMessage, any type with its own MarshalJSON or MarshalText)
// is handed to encoding/json for that field alone, and a type it cannot plan at all (omitzero,
// an embedded pointer, ",string") is written by encoding/json whole. answer_json_test.go holds it
// to encoding/json's output over random values of every answer type of the spec. An embedded
// struct's fields are written where it is embedded, by encoding/json's dominance rules.

// appendAnswer appends v's JSON and a newline, as json.Encoder.Encode does.
func appendAnswer(b []byte, v any) ([]byte, error) {
	t := reflect.TypeOf(v)
	if t == nil {
		return append(b, "null\n"...), nil
	}
	if p := planOf(t); p != nil && p.direct {
		var err error
		b, err = p.enc(b, efaceData(v))
		return append(b, '\n'), err
	}
	out, err := json.Marshal(v)
	return append(append(b, out...), '\n'), err
}

// efaceData is the pointer an interface holds to its value; planOf marks direct only types
// that are stored behind such a pointer (every struct but a pointer-shaped one).
func efaceData(v any) unsafe.Pointer {
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1]
}

// encFunc appends the JSON of the value at p.
type encFunc func(b []byte, p unsafe.Pointer) ([]byte, error)

// typePlan is how one type is written; nil from planOf means "by encoding/json, whole".
type typePlan struct {
	enc encFunc
	// direct: an interface holding this type points at a copy of it (appendAnswer's entry).
	direct bool
}

var plans sync.Map // reflect.Type → *typePlan (nil pointer: not planned)

// planOf returns t's plan, making it on first use.
func planOf(t reflect.Type) *typePlan {
	if p, ok := plans.Load(t); ok {
		return p.(*typePlan)
	}
	var p *typePlan
	if t.Kind() == reflect.Struct {
		if enc, ok := encoderFor(t, map[reflect.Type]bool{}); ok {
			p = &typePlan{enc: enc, direct: !pointerShaped(t)}
		}
	}
	actual, _ := plans.LoadOrStore(t, p)
	return actual.(*typePlan)
}

// pointerShaped types are stored in an interface's data word itself, not behind it.
func pointerShaped(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Struct:
		return t.NumField() == 1 && pointerShaped(t.Field(0).Type)
	case reflect.Array:
		return t.Len() == 1 && pointerShaped(t.Elem())
	}
	return false
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// ownEncoding tells a type that encodes itself: encoding/json calls its method.
func ownEncoding(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonMarshalerType) || pt.Implements(jsonMarshalerType) ||
		t.Implements(textMarshalerType) || pt.Implements(textMarshalerType)
}

// valueEncodes tells a type whose value has the same encoding methods as its pointer.
func valueEncodes(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(jsonMarshalerType) == pt.Implements(jsonMarshalerType) &&
		t.Implements(textMarshalerType) == pt.Implements(textMarshalerType)
}

// encoderFor returns the append function of a field or element of type t; ok is false when
// t's containing struct must go to encoding/json whole. open holds the structs being planned:
// a type that contains itself goes to encoding/json.
func encoderFor(t reflect.Type, open map[reflect.Type]bool) (encFunc, bool) {
	if t == timeType {
		return appendTime, true
	}
	// A pointer is written as null or as what it points at, unless only the pointer has the
	// method that encodes it: encoding/json calls that one, and so does viaEncodingJSON.
	if ownEncoding(t) && !(t.Kind() == reflect.Pointer && (t.Elem() == timeType || valueEncodes(t.Elem()))) {
		return viaEncodingJSON(t), true
	}
	switch t.Kind() {
	case reflect.String:
		return func(b []byte, p unsafe.Pointer) ([]byte, error) {
			return appendString(b, *(*string)(p)), nil
		}, true
	case reflect.Bool:
		return func(b []byte, p unsafe.Pointer) ([]byte, error) {
			return strconv.AppendBool(b, *(*bool)(p)), nil
		}, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intEncoder(t.Size()), true
	case reflect.Pointer:
		elem, ok := encoderFor(t.Elem(), open)
		if !ok {
			return nil, false
		}
		return func(b []byte, p unsafe.Pointer) ([]byte, error) {
			if e := *(*unsafe.Pointer)(p); e != nil {
				return elem(b, e)
			}
			return append(b, "null"...), nil
		}, true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 { // base64, as encoding/json writes []byte
			return viaEncodingJSON(t), true
		}
		elem, ok := encoderFor(t.Elem(), open)
		if !ok {
			return nil, false
		}
		return sliceEncoder(elem, t.Elem().Size()), true
	case reflect.Struct:
		if open[t] {
			return nil, false
		}
		open[t] = true
		defer delete(open, t)
		return structEncoder(t, open)
	}
	return viaEncodingJSON(t), true
}

func intEncoder(size uintptr) encFunc {
	return func(b []byte, p unsafe.Pointer) ([]byte, error) {
		var n int64
		switch size {
		case 1:
			n = int64(*(*int8)(p))
		case 2:
			n = int64(*(*int16)(p))
		case 4:
			n = int64(*(*int32)(p))
		default:
			n = *(*int64)(p)
		}
		return strconv.AppendInt(b, n, 10), nil
	}
}

func sliceEncoder(elem encFunc, size uintptr) encFunc {
	return func(b []byte, p unsafe.Pointer) ([]byte, error) {
		// Every slice header has the same layout; only the element size differs.
		h := (*struct {
			data     unsafe.Pointer
			len, cap int
		})(p)
		if h.data == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		var err error
		for i := range h.len {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = elem(b, unsafe.Add(h.data, uintptr(i)*size)); err != nil {
				return b, err
			}
		}
		return append(b, ']'), nil
	}
}

// fieldPlan is one struct field: its offset, `"name":` (with the comma before it but for the
// first field written), how to write it, and when omitempty leaves it out.
type fieldPlan struct {
	offset uintptr
	key    string
	enc    encFunc
	empty  func(p unsafe.Pointer) bool // nil: never left out
}

func structEncoder(t reflect.Type, open map[reflect.Type]bool) (encFunc, bool) {
	candidates, ok := structFields(t, 0, 0, open)
	if !ok {
		return nil, false
	}
	fields := dominantFields(candidates)
	return func(b []byte, p unsafe.Pointer) ([]byte, error) {
		b = append(b, '{')
		first := true
		var err error
		for i := range fields {
			f := &fields[i]
			fp := unsafe.Add(p, f.offset)
			if f.empty != nil && f.empty(fp) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, f.key...)
			if b, err = f.enc(b, fp); err != nil {
				return b, err
			}
		}
		return append(b, '}'), nil
	}, true
}

// fieldCandidate is a field a struct's JSON may hold: its plan, its name, how deep an
// embedding it comes from and whether its tag names it (encoding/json's dominance rules).
type fieldCandidate struct {
	fieldPlan
	name   string
	depth  int
	tagged bool
}

// structFields lists t's fields in encoding/json's order, those of an embedded struct (a
// struct type embedded by value, without a tag's name) where it is embedded, at offset base.
// ok is false for what a plan does not copy of encoding/json: an embedded pointer or
// non-struct, an unexported field, omitzero or ",string".
func structFields(t reflect.Type, base uintptr, depth int, open map[reflect.Type]bool) ([]fieldCandidate, bool) {
	var out []fieldCandidate
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := cutComma(tag)
		// encoding/json promotes an embedded struct's fields, exported or not.
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			inner, ok := structFields(f.Type, base+f.Offset, depth+1, open)
			if !ok {
				return nil, false
			}
			out = append(out, inner...)
			continue
		}
		if f.Anonymous || !f.IsExported() {
			return nil, false
		}
		tagged := name != ""
		if !tagged {
			name = f.Name
		}
		omitEmpty := false
		for opts != "" {
			var o string
			o, opts, _ = cutComma(opts)
			switch o {
			case "omitempty":
				omitEmpty = true
			default: // omitzero, string: encoding/json's
				return nil, false
			}
		}
		enc, ok := encoderFor(f.Type, open)
		if !ok || !plainName(name) {
			return nil, false
		}
		fp := fieldPlan{offset: base + f.Offset, key: strconv.Quote(name) + ":", enc: enc}
		if omitEmpty {
			if fp.empty, ok = emptyTest(f.Type); !ok {
				return nil, false
			}
		}
		out = append(out, fieldCandidate{fieldPlan: fp, name: name, depth: depth, tagged: tagged})
	}
	return out, true
}

// dominantFields keeps, of the candidates sharing a name, the one encoding/json writes: the
// shallowest, then, of several as shallow, the only tagged one; a name that is still shared
// is written by none. The kept ones stay in their order.
func dominantFields(candidates []fieldCandidate) []fieldPlan {
	byName := map[string][]int{}
	for i, c := range candidates {
		byName[c.name] = append(byName[c.name], i)
	}
	keep := make([]bool, len(candidates))
	for _, idxs := range byName {
		shallowest := candidates[idxs[0]].depth
		for _, i := range idxs {
			shallowest = min(shallowest, candidates[i].depth)
		}
		var atTop, tagged []int
		for _, i := range idxs {
			if candidates[i].depth == shallowest {
				atTop = append(atTop, i)
				if candidates[i].tagged {
					tagged = append(tagged, i)
				}
			}
		}
		switch {
		case len(atTop) == 1:
			keep[atTop[0]] = true
		case len(tagged) == 1:
			keep[tagged[0]] = true
		}
	}
	var fields []fieldPlan
	for i, c := range candidates {
		if keep[i] {
			fields = append(fields, c.fieldPlan)
		}
	}
	return fields
}

func cutComma(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// plainName is a key that strconv.Quote writes as encoding/json does (ASCII letters, digits
// and the punctuation the generated models use).
func plainName(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '_' || c == '-' || c == '.' || c == '$' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return name != ""
}

// emptyTest is omitempty's rule (encoding/json's isEmptyValue) for the kinds a plan writes.
func emptyTest(t reflect.Type) (func(p unsafe.Pointer) bool, bool) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map:
		if t.Kind() == reflect.Map {
			return func(p unsafe.Pointer) bool { return reflect.NewAt(t, p).Elem().Len() == 0 }, true
		}
		return func(p unsafe.Pointer) bool { return *(*unsafe.Pointer)(p) == nil }, true
	case reflect.Slice:
		return func(p unsafe.Pointer) bool { return len(*(*[]byte)(p)) == 0 }, true
	case reflect.String:
		return func(p unsafe.Pointer) bool { return len(*(*string)(p)) == 0 }, true
	case reflect.Bool:
		return func(p unsafe.Pointer) bool { return !*(*bool)(p) }, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface:
		return func(p unsafe.Pointer) bool { return reflect.NewAt(t, p).Elem().IsZero() }, true
	}
	return nil, false // a struct or an array: never empty to encoding/json, rare in answers
}

// viaEncodingJSON writes a value of type t through encoding/json: for the kinds and types a
// plan does not write itself.
func viaEncodingJSON(t reflect.Type) encFunc {
	return func(b []byte, p unsafe.Pointer) ([]byte, error) {
		out, err := json.Marshal(reflect.NewAt(t, p).Elem().Interface())
		return append(b, out...), err
	}
}

// appendTime is time.Time's MarshalJSON without its copy and encoding/json's compaction of it.
func appendTime(b []byte, p unsafe.Pointer) ([]byte, error) {
	t := *(*time.Time)(p)
	if y := t.Year(); y < 0 || y > 9999 {
		_, err := t.MarshalJSON() // its error, word for word
		return b, err
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

const hexDigits = "0123456789abcdef"

// appendString is encoding/json's string encoding with HTML escaping on (json.Marshal's and
// json.Encoder's default): <, > and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029
// escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Header values set as canonical keys' slices, without Header.Set's canonicalisation and
// slice per answer; nothing appends to an answer's Content-Type.
var (
	jsonContentType    = []string{"application/json"}
	problemContentType = []string{"application/problem+json"}
	noStore            = []string{"no-store"}
)

// answerBuffers keeps encoding buffers between answers; one that grew past maxPooledAnswer
// (a long listing) is dropped rather than held.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const maxPooledAnswer = 64 << 10

func putAnswerBuffer(b *[]byte) {
	if cap(*b) <= maxPooledAnswer {
		answerBuffers.Put(b)
	}
}
