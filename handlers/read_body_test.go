package handlers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readBody reads a declared length into one buffer and still refuses a body that does not
// match it.
func TestReadBodyHoldsTheDeclaredLength(t *testing.T) {
	got, err := readBody(strings.NewReader(`{"a":1}`), 7)
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(got))
	_, err = readBody(strings.NewReader(`{"a":`), 7)
	require.Error(t, err, "shorter than declared")
	_, err = readBody(strings.NewReader(`{"a":1} x`), 7)
	require.Error(t, err, "longer than declared")
	got, err = readBody(strings.NewReader(`{"b":2}`), -1)
	require.NoError(t, err)
	require.Equal(t, `{"b":2}`, string(got))
}
