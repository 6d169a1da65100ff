package airflowfake

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// fieldKind is what a body field may hold, as the OpenAPI schema types it. Every field the
// bridge sends is nullable (anyOf [T, null]) in Airflow's schemas.
type fieldKind int

const (
	kindString   fieldKind = iota // string | null
	kindDateTime                  // string, format date-time | null
	kindObject                    // object | null
)

// schema is a request body's schema: its fields, which are required (present, even if
// null), and, for an enum field, its values.
type schema struct {
	fields   map[string]fieldKind
	required []string
	enums    map[string][]string
}

// triggerBody is TriggerDAGRunPostBody (additionalProperties: false; logical_date required).
var triggerBody = schema{
	fields: map[string]fieldKind{
		"dag_run_id": kindString, "data_interval_start": kindDateTime, "data_interval_end": kindDateTime,
		"logical_date": kindDateTime, "run_after": kindDateTime, "conf": kindObject, "note": kindString,
	},
	required: []string{"logical_date"},
}

// patchBody is DAGRunPatchBody (additionalProperties: false; state is DAGRunPatchStates).
var patchBody = schema{
	fields: map[string]fieldKind{"state": kindString, "note": kindString},
	enums:  map[string][]string{"state": {"queued", "success", "failed"}},
}

// validation is one HTTPValidationError with one ValidationError, as FastAPI writes it
// (with the offending input).
func validation(typ string, loc []any, msg string, input any) map[string]any {
	return map[string]any{"detail": []map[string]any{{"type": typ, "loc": loc, "msg": msg, "input": input}}}
}

// decode reads a JSON body against s. On a violation it answers 422 as FastAPI would and
// returns false; an extra field also fails the test, since the bridge must never send one.
func (f *Fake) decode(w http.ResponseWriter, r *http.Request, s schema) (map[string]json.RawMessage, bool) {
	var body map[string]json.RawMessage
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&body); err != nil || body == nil {
		answer(w, http.StatusUnprocessableEntity, validation("model_attributes_type", []any{"body"}, "Input should be a valid dictionary or object to extract fields from", nil))
		return nil, false
	}
	keys := make([]string, 0, len(body))
	for k := range body {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kind, ok := s.fields[k]
		if !ok {
			var input any
			_ = json.Unmarshal(body[k], &input)
			f.t.Errorf("airflowfake: %s %s sent the field %q, which the schema forbids (extra_forbidden)", r.Method, r.URL.Path, k)
			answer(w, http.StatusUnprocessableEntity, validation("extra_forbidden", []any{"body", k}, "Extra inputs are not permitted", input))
			return nil, false
		}
		if typ, msg := checkKind(kind, body[k]); typ != "" {
			var input any
			_ = json.Unmarshal(body[k], &input)
			answer(w, http.StatusUnprocessableEntity, validation(typ, []any{"body", k}, msg, input))
			return nil, false
		}
		if values, ok := s.enums[k]; ok && !bytes.Equal(body[k], []byte("null")) {
			var v string
			_ = json.Unmarshal(body[k], &v)
			if !slices.Contains(values, v) {
				answer(w, http.StatusUnprocessableEntity, validation("enum", []any{"body", k}, "Input should be one of the enum values", v))
				return nil, false
			}
		}
	}
	for _, k := range s.required {
		if _, ok := body[k]; !ok {
			answer(w, http.StatusUnprocessableEntity, validation("missing", []any{"body", k}, "Field required", nil))
			return nil, false
		}
	}
	return body, true
}

// checkKind answers the ValidationError type and message of a value that is not of kind.
func checkKind(kind fieldKind, raw json.RawMessage) (string, string) {
	if bytes.Equal(raw, []byte("null")) {
		return "", ""
	}
	switch kind {
	case kindString, kindDateTime:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "string_type", "Input should be a valid string"
		}
		if kind == kindDateTime {
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
				return "datetime_from_date_parsing", "Input should be a valid datetime"
			}
		}
	case kindObject:
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return "dict_type", "Input should be a valid dictionary"
		}
	}
	return "", ""
}

// timeField reads a date-time field that checkKind accepted; nil for null or absent.
func timeField(body map[string]json.RawMessage, k string) *time.Time {
	var s *string
	if raw, ok := body[k]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	if s == nil {
		return nil
	}
	t, _ := time.Parse(time.RFC3339Nano, *s)
	return &t
}
