package domain

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func hashBase() BackfillRequest {
	desc := "d"
	return BackfillRequest{
		DagID:             "dag",
		FromDate:          time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC),
		ToDate:            time.Date(2024, 1, 3, 0, 0, 0, 0, time.UTC),
		DagRunConf:        []byte(`{"n": 9007199254740993}`),
		ReprocessBehavior: ReprocessNone,
		MaxActiveRuns:     10,
		Description:       &desc,
		IdempotencyKey:    "k",
	}
}

// changed returns v changed to another value of its type, or false for a kind this test does
// not know yet (add it: a field the hash cannot be shown to cover must not pass).
func sliceValues(v reflect.Value) []reflect.Value {
	out := make([]reflect.Value, v.Len())
	for i := range out {
		out[i] = v.Index(i)
	}
	return out
}

func changed(v reflect.Value) (reflect.Value, bool) {
	out := reflect.New(v.Type()).Elem()
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		out.Set(reflect.ValueOf(v.Interface().(time.Time).Add(time.Microsecond)))
	case v.Kind() == reflect.String:
		out.SetString(v.String() + "x")
	case v.Kind() == reflect.Bool:
		out.SetBool(!v.Bool())
	case v.CanInt():
		out.SetInt(v.Int() + 1)
	case v.CanUint():
		out.SetUint(v.Uint() + 1)
	case v.CanFloat():
		out.SetFloat(v.Float() + 1)
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			// nil against a pointer to a zero value, then against a non-zero one.
			out.Set(reflect.New(v.Type().Elem()))
			return out, true
		}
		inner, ok := changed(v.Elem())
		if !ok {
			return out, false
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(inner)
		out.Set(p)
	case v.Kind() == reflect.Slice:
		// A slice changes by gaining an element.
		elem, ok := changed(reflect.New(v.Type().Elem()).Elem())
		if !ok {
			return out, false
		}
		out.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, v.Len()+1), append(sliceValues(v), elem)...))
	default:
		return out, false
	}
	return out, true
}

// Every field of a creation request but the key, the If-Match precondition and the conf
// changes the hash: a field the hash
// missed would replay a different request under the same key. The conf is compared apart, as
// jsonb, and the key is what the hash is stored under.
func TestRequestHashCoversEveryField(t *testing.T) {
	base := hashBase()
	want, err := RequestHash(base)
	require.NoError(t, err)
	require.Equal(t, base.DagRunConf, want.Conf)

	typ := reflect.TypeFor[BackfillRequest]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		p := hashBase()
		field := reflect.ValueOf(&p).Elem().Field(i)
		switch f.Name {
		case "DagRunConf":
			field.Set(reflect.ValueOf([]byte(`{"n": 9007199254740992}`)))
			got, err := RequestHash(p)
			require.NoError(t, err)
			require.Equal(t, want.Hash, got.Hash, "the conf is compared as jsonb, not hashed")
			require.Equal(t, []byte(`{"n": 9007199254740992}`), got.Conf, "the conf is kept as sent")
			continue
		case "IfMatch":
			field.Set(reflect.ValueOf([]string{"other"}))
			got, err := RequestHash(p)
			require.NoError(t, err)
			require.Equal(t, want, got, "a precondition is not part of the request")
			continue
		case "IdempotencyKey":
			field.SetString("other")
			got, err := RequestHash(p)
			require.NoError(t, err)
			require.Equal(t, want, got)
			continue
		}
		for _, start := range []reflect.Value{field, reflect.Zero(f.Type)} {
			field.Set(start)
			from, err := RequestHash(p)
			require.NoError(t, err)
			next, ok := changed(start)
			require.True(t, ok, "field %s (%s): teach this test how to change it", f.Name, f.Type)
			field.Set(next)
			got, err := RequestHash(p)
			require.NoError(t, err)
			require.NotEqual(t, from.Hash, got.Hash, "field %s must change the request hash", f.Name)
		}
	}
}

// The same instants in another time zone are the same request.
func TestRequestHashIgnoresTimeZones(t *testing.T) {
	base := hashBase()
	want, err := RequestHash(base)
	require.NoError(t, err)
	zone := time.FixedZone("plus2", 2*60*60)
	base.FromDate = base.FromDate.In(zone)
	base.ToDate = base.ToDate.In(zone)
	got, err := RequestHash(base)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// Hashes are stored under idempotency keys: a release that changed the hash of the same
// request would answer a client's retry across the upgrade with idempotency_key_reused. The
// value was computed by the code before it moved to this package.
func TestRequestHashIsStable(t *testing.T) {
	got, err := RequestHash(hashBase())
	require.NoError(t, err)
	require.Equal(t, "dd15edcc759083a1d423161cb4f75aac908c1533c94ce2d523466baf1dddbf2c", got.Hash)
}
