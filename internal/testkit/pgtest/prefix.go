package pgtest

import (
	"fmt"
	"regexp"
)

// prefixForm is what a database-name prefix may be: a lower-case identifier start that needs
// no quoting, short enough that <prefix>tpl_<pid>_<token>_<n> stays under PostgreSQL's 63
// bytes, and ending in "_" so that "bf_t_" can never be read as a prefix of "bf_tx_...".
var prefixForm = regexp.MustCompile(`^[a-z][a-z0-9_]{0,22}_$`)

// dbPrefix answers the prefix TEST_DB_PREFIX sets (raw), or the default when it is empty.
func dbPrefix(raw string) (string, error) {
	if raw == "" {
		return defaultPrefix, nil
	}
	if !prefixForm.MatchString(raw) {
		return "", fmt.Errorf("%s=%q: want a lower-case identifier prefix of at most 24 characters ending in _ (like %s)", EnvPrefix, raw, defaultPrefix)
	}
	return raw, nil
}
