package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/api"
	"github.com/stretchr/testify/require"
)

// answerTypes are the spec's models and the handlers' own answer shapes.
var answerTypes = []any{
	api.Backfill{}, api.BackfillCollection{}, api.BackfillDagRun{}, api.BackfillDagRunCollection{},
	api.BackfillEstimate{}, api.BackfillProgress{}, api.ClaimResponse{}, api.Dag{}, api.DagCollection{},
	api.DagRun{}, api.DagRunCollection{}, api.DryRunCollection{}, api.DryRunEntry{}, api.Event{},
	api.EventCollection{}, api.EventData{}, api.FieldError{}, api.Health{}, api.HeartbeatResponse{},
	api.Pool{}, api.PoolRate{}, api.PoolCollection{}, api.Problem{}, api.Webhook{},
	api.WebhookCollection{}, api.WebhookDelivery{}, api.WebhookDeliveryCollection{},
	api.WebhookWithSecret{}, eventCollectionOut{}, backfillWithETA{},
	// Shapes the models do not have today: omitempty on every kind, a self-reference,
	// embedded structs (shadowing, tie-breaking by tag, a name two embeddings share), a
	// pointer-shaped struct.
	omitting{}, selfRef{}, embedding{}, embeddingTwice{}, onePointer{},
}

type omitting struct {
	S  string          `json:"s,omitempty"`
	B  bool            `json:"b,omitempty"`
	I  int16           `json:"i,omitempty"`
	U  uint32          `json:"u,omitempty"`
	F  float64         `json:"f,omitempty"`
	P  *string         `json:"p,omitempty"`
	L  []int64         `json:"l,omitempty"`
	M  map[string]int  `json:"m,omitempty"`
	R  json.RawMessage `json:"r,omitempty"`
	X  any             `json:"x,omitempty"`
	N  int             `json:"-"`
	No string
}

type selfRef struct {
	Name string   `json:"name"`
	Next *selfRef `json:"next"`
}

type embedding struct {
	api.FieldError
	Extra string `json:"extra"`
	// Field shadows the embedded FieldError's "field".
	Field *int `json:"field"`
}

type Tagged struct {
	A string `json:"a"`
	B string
	X string `json:"D"`
}

type Untagged struct {
	A string
	B string
	D string
	C int `json:"c,omitempty"`
}

// embeddingTwice: "a" and "A" are two names; "B" is untagged in both (written by neither);
// "D" is tagged in one (that one is written); "c" comes from one only.
type embeddingTwice struct {
	Tagged
	Untagged
	Z bool `json:"z"`
}

type embeddedPointer struct {
	*api.FieldError
	Extra string `json:"extra"`
}

type onePointer struct {
	P *api.FieldError `json:"p"`
}

// TestAppendAnswerWritesWhatEncodingJSONWrites holds the planned encoding to encoding/json's,
// byte for byte (and error for error), over random values of every answer type: strings
// with every escape, invalid UTF-8 and line separators, times in many zones and out of
// range, nil and empty pointers, slices and maps. The seed is printed on failure.
func TestAppendAnswerWritesWhatEncodingJSONWrites(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, sample := range answerTypes {
		typ := reflect.TypeOf(sample)
		for i := range 300 {
			v := reflect.New(typ).Elem()
			fill(rng, v, 0)
			val := v.Interface()
			var want bytes.Buffer
			wantErr := json.NewEncoder(&want).Encode(val)
			got, err := appendAnswer(nil, val)
			msg := fmt.Sprintf("%s, value %d, seed %d", typ, i, seed)
			if wantErr != nil {
				require.Error(t, err, msg)
				continue
			}
			require.NoError(t, err, msg)
			require.Equal(t, want.String(), string(got), msg)
		}
	}
}

// TestAnswerTypesArePlanned: every answer of the spec is written from a plan, not handed to
// encoding/json whole, so a model change that defeats the plan shows here.
func TestAnswerTypesArePlanned(t *testing.T) {
	for _, sample := range answerTypes {
		typ := reflect.TypeOf(sample)
		if typ.PkgPath() != reflect.TypeFor[api.Backfill]().PkgPath() && typ != reflect.TypeFor[eventCollectionOut]() {
			continue
		}
		p := planOf(typ)
		require.NotNil(t, p, "%s is not planned", typ)
		require.True(t, p.direct, typ)
	}
	require.NotNil(t, planOf(reflect.TypeFor[embedding]()), "an embedded struct is planned")
	require.NotNil(t, planOf(reflect.TypeFor[embeddingTwice]()), "structs embedded side by side are planned")
	require.NotNil(t, planOf(reflect.TypeFor[backfillWithETA]()), "the status read's answer is planned")
	require.Nil(t, planOf(reflect.TypeFor[embeddedPointer]()), "an embedded pointer goes to encoding/json whole")
	require.False(t, planOf(reflect.TypeFor[onePointer]()).direct, "a pointer-shaped struct sits in the interface itself")
}

// TestStatusAnswerEncodesWithoutAllocating: the status read's answer costs no allocation
// once the buffer has grown.
func TestStatusAnswerEncodesWithoutAllocating(t *testing.T) {
	s, now := "a <reason> & \"quoted\"", time.Now()
	b := api.Backfill{CodeRef: &s, CompletedAt: &now, CreatedAt: now, DagId: "sales_daily", FromDate: now,
		Id: 42, MaxActiveRuns: 16, PlanHash: &s, State: api.BackfillStateRunning, ToDate: now, UpdatedAt: now,
		Progress: api.BackfillProgress{Queued: 3, Total: 3}}
	var v any = b
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = appendAnswer(buf[:0], v)
		require.NoError(t, err)
	})
	require.Zero(t, allocs)
}

var zones = []*time.Location{time.UTC, time.FixedZone("", -(3*3600 + 30*60)), time.FixedZone("X", 14*3600), time.Local}

var runePool = []rune("aZ09_-. <>&\"\\/\n\r\t\b\f\x00\x1f\x7f é€😀\u2028\u2029\ufffd")

// fill sets v to a random value of its type; depth stops self-references.
func fill(rng *rand.Rand, v reflect.Value, depth int) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		sec := rng.Int64N(400*365*86400) - 100*365*86400
		if rng.IntN(50) == 0 {
			sec = rng.Int64N(math.MaxInt32) * 1000 // beyond year 9999: MarshalJSON's error
		}
		v.Set(reflect.ValueOf(time.Unix(sec, rng.Int64N(1e9)*int64(rng.IntN(2))).In(zones[rng.IntN(len(zones))])))
		return
	}
	if v.Type() == reflect.TypeFor[json.RawMessage]() {
		raws := []string{`{"a": [1, 2.5, "x<y"]}`, `null`, `"s"`, ` 3 `, `{}`}
		v.SetBytes([]byte(raws[rng.IntN(len(raws))]))
		return
	}
	switch v.Kind() {
	case reflect.String:
		n := rng.IntN(12)
		var bs []byte
		for range n {
			if rng.IntN(20) == 0 {
				bs = append(bs, 0xff) // invalid UTF-8
				continue
			}
			bs = append(bs, string(runePool[rng.IntN(len(runePool))])...)
		}
		v.SetString(string(bs))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if rng.IntN(3) == 0 {
			v.SetInt(0)
		} else {
			v.SetInt(rng.Int64() >> (64 - v.Type().Bits()))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rng.Uint64() >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat([]float64{0, 1.5, 1e21, 1e-7, -3.25, 123456789}[rng.IntN(6)])
	case reflect.Pointer:
		if depth > 3 || rng.IntN(3) == 0 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(rng, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 3 || rng.IntN(4) == 0 {
			return
		}
		n := rng.IntN(3)
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fill(rng, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if rng.IntN(3) == 0 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range rng.IntN(3) {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(rng, k, depth+1)
			fill(rng, e, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Interface:
		if rng.IntN(2) == 0 {
			v.Set(reflect.ValueOf("x<y"))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1)
			}
		}
	}
}
