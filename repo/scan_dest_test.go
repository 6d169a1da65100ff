package repo

import (
	"reflect"
	"strings"
	"testing"
)

// scanDest must list the fields in backfillColumns order: a column added to one and not the
// other, or two swapped, would scan into the wrong field.
func TestBackfillScanDestFollowsBackfillColumns(t *testing.T) {
	var b Backfill
	dest := b.scanDest()
	cols := strings.Split(backfillColumns, ",")
	if len(dest) != len(cols) {
		t.Fatalf("scanDest has %d fields, backfillColumns %d columns", len(dest), len(cols))
	}
	byAddr := map[uintptr]string{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			f, sf := v.Field(i), v.Type().Field(i)
			if sf.Anonymous {
				walk(f)
				continue
			}
			byAddr[f.Addr().Pointer()] = sf.Tag.Get("db")
		}
	}
	walk(reflect.ValueOf(&b).Elem())
	for i, d := range dest {
		want := strings.TrimSpace(cols[i])
		if got := byAddr[reflect.ValueOf(d).Pointer()]; got != want {
			t.Errorf("scanDest[%d] is the field of column %q, backfillColumns has %q there", i, got, want)
		}
	}
}
