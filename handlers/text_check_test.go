package handlers

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFindBadTextNamesTheField(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"a":"\ud800"}`:                     "a",
		`{"a":"x\udc00"}`:                    "a",
		`{"a":"\ud800\u0041"}`:               "a",
		`{"conf":{"k":[1,"ok","\u0000"]}}`:   "conf.k.2",
		`{"conf":{"\ud800":1}}`:              "conf.\ufffd",
		"{\"description\":\"\xff\"}":         "description",
		`{"a":{"b":1},"c":[{"d":"\udfff"}]}`: "c.0.d",
		`"\ud800"`:                           "body",
	} {
		field, _, bad := findBadText([]byte(body))
		require.True(t, bad, body)
		require.Equal(t, want, field, body)
	}
	for _, body := range []string{
		`{"a":"\ud83d\ude00"}`, `{"a":"\\ud800"}`, `{"a":"\\u0000"}`, `{"a":"é\u00e9"}`,
		`{"a":[1,2,{"b":"\"\\"}],"c":null}`, `{}`,
	} {
		_, _, bad := findBadText([]byte(body))
		require.False(t, bad, body)
	}
}
