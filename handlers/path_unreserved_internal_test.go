package handlers

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// Escapes of unreserved characters are decoded, in either case of hex digit; every other
// escape, and a malformed one, is kept as it is; the result unescapes to the same path.
func TestUnescapeUnreserved(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/dags/d%31", "/dags/d1"},
		{"/dags/%64%2d%5F%2e%7e", "/dags/d-_.~"},
		{"/dags/d%2F1", "/dags/d%2F1"},
		{"/dags/d%2f%31", "/dags/d%2f1"},
		{"/dags/d%251", "/dags/d%251"},
		{"/runs/a%3Ab%2Bc", "/runs/a%3Ab%2Bc"},
		{"/dags/d%3", "/dags/d%3"},
		{"/dags/d%", "/dags/d%"},
		{"/dags/d%zz", "/dags/d%zz"},
		{"/dags/%C3%A9", "/dags/%C3%A9"},
	} {
		got, changed := unescapeUnreserved(c.in)
		require.Equal(t, c.want, got, c.in)
		require.Equal(t, c.want != c.in, changed, c.in)
		if a, err := url.PathUnescape(c.in); err == nil {
			b, err := url.PathUnescape(got)
			require.NoError(t, err)
			require.Equal(t, a, b, "%s names the same path", c.in)
		}
	}
}
