package main

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/lib/pq"
)

// dsn is a connection string read into lib/pq's keywords (host, port, user, password,
// dbname, sslmode, target_session_attrs, ...). Operators copy DSNs from libpq's
// documentation, in three forms; lib/pq reads only two of them the way libpq does:
//
//   - postgres://u@h1:5433,h2:5434/db: libpq's URL with host:port pairs. lib/pq reads the
//     host list as one host name ("h1:5433,h2" on port 5434), so it is translated here;
//   - postgres://u@h1,h2/db?port=5433,5434: the URL with a port list, which lib/pq reads;
//   - host=h1,h2 port=5433,5434 dbname=db: key=value, which lib/pq reads.
//
// Everything is turned into key=value for lib/pq, and anything that would silently connect
// somewhere else than the operator meant is refused with a message naming the right form.
type dsn struct {
	params map[string]string
}

// multiHostForm is the form named in error messages.
const multiHostForm = "postgres://user@host1:5432,host2:5432/dbname?target_session_attrs=read-write"

// parseDSN reads a URL (postgres:// or postgresql://) or a key=value connection string.
func parseDSN(raw string) (dsn, error) {
	raw = strings.TrimSpace(raw)
	var (
		d   dsn
		err error
	)
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		d, err = parseURLDSN(raw)
	case strings.Contains(raw, "="):
		d.params, err = parseKeyValue(raw)
	default:
		err = errors.New("DATABASE_URL must be a postgres:// URL (e.g. " + multiHostForm + ") or key=value pairs (host=... dbname=...)")
	}
	if err != nil {
		return dsn{}, err
	}
	if err := d.check(); err != nil {
		return dsn{}, err
	}
	return d, nil
}

func parseURLDSN(raw string) (dsn, error) {
	rest := raw[strings.Index(raw, "://")+3:]
	// The authority ends at the path or the query; libpq's host lists use ',' and ':' in it,
	// which net/url refuses or misreads, so it is split by hand.
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	p := map[string]string{}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		u, err := url.PathUnescape(user)
		if err != nil {
			return dsn{}, fmt.Errorf("DATABASE_URL: bad user name: %w", err)
		}
		setNonEmpty(p, "user", u)
		if hasPass {
			pw, err := url.PathUnescape(pass)
			if err != nil {
				return dsn{}, errors.New("DATABASE_URL: bad percent-encoding in the password")
			}
			setNonEmpty(p, "password", pw)
		}
	}
	if authority != "" {
		hosts, ports, err := splitHostList(authority)
		if err != nil {
			return dsn{}, err
		}
		p["host"] = strings.Join(hosts, ",")
		if slices.ContainsFunc(ports, func(s string) bool { return s != "" }) {
			// libpq's default for a host written without a port; lib/pq refuses an empty
			// first item.
			for i := range ports {
				if ports[i] == "" {
					ports[i] = "5432"
				}
			}
			p["port"] = strings.Join(ports, ",")
		}
	}
	path, query, _ := strings.Cut(tail, "?")
	if path != "" && path != "/" {
		db, err := url.PathUnescape(strings.TrimPrefix(path, "/"))
		if err != nil {
			return dsn{}, fmt.Errorf("DATABASE_URL: bad database name: %w", err)
		}
		p["dbname"] = db
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return dsn{}, fmt.Errorf("DATABASE_URL: bad query string: %w", err)
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return dsn{}, fmt.Errorf("DATABASE_URL: %s is given %d times; give it once", k, len(vs))
		}
		name := k
		if k == "database" {
			name = "dbname"
		}
		if _, dup := p[name]; dup {
			return dsn{}, fmt.Errorf("DATABASE_URL: %s is given both in the URL and as ?%s=; give it once (e.g. %s)", name, k, multiHostForm)
		}
		p[name] = vs[0]
	}
	return dsn{params: p}, nil
}

// splitHostList reads "h1:5433,[::1]:5434,h3" into hosts and ports ("" = the default port).
func splitHostList(authority string) (hosts, ports []string, err error) {
	for _, item := range strings.Split(authority, ",") {
		host, port := item, ""
		if strings.HasPrefix(item, "[") {
			end := strings.Index(item, "]")
			if end < 0 {
				return nil, nil, fmt.Errorf("DATABASE_URL: unclosed '[' in host %q", item)
			}
			host, port = item[1:end], item[end+1:]
			if port != "" && !strings.HasPrefix(port, ":") {
				return nil, nil, fmt.Errorf("DATABASE_URL: unexpected %q after [%s]", port, host)
			}
			port = strings.TrimPrefix(port, ":")
		} else if h, pt, found := strings.Cut(item, ":"); found {
			host, port = h, pt
		}
		h, err := url.PathUnescape(host)
		if err != nil {
			return nil, nil, fmt.Errorf("DATABASE_URL: bad host %q: %w", host, err)
		}
		if port != "" && strings.Trim(port, "0123456789") != "" {
			return nil, nil, fmt.Errorf("DATABASE_URL: port %q of host %q is not a number (several hosts are written %s)", port, h, multiHostForm)
		}
		hosts, ports = append(hosts, h), append(ports, port)
	}
	return hosts, ports, nil
}

// parseKeyValue reads libpq's key=value form: values may be single-quoted, with \' and \\
// escapes inside.
func parseKeyValue(s string) (map[string]string, error) {
	p := map[string]string{}
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return p, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && s[i] != ' ' && s[i] != '\t' {
			i++
		}
		key := s[start:i]
		skipSpace()
		if i >= len(s) || s[i] != '=' {
			return nil, fmt.Errorf("DATABASE_URL: missing \"=\" after %q", key)
		}
		i++
		skipSpace()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i >= len(s) {
					return nil, errors.New("DATABASE_URL: unterminated quoted value")
				}
				c := s[i]
				i++
				if c == '\'' {
					break
				}
				if c == '\\' && i < len(s) {
					c = s[i]
					i++
				}
				val.WriteByte(c)
			}
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
				i++
			}
		}
		if _, dup := p[key]; dup {
			return nil, fmt.Errorf("DATABASE_URL: %s is given twice; give it once", key)
		}
		p[key] = val.String()
	}
}

func setNonEmpty(p map[string]string, k, v string) {
	if v != "" {
		p[k] = v
	}
}

// hosts returns the host list ("" when none is given: lib/pq then uses localhost).
func (d dsn) hosts() []string {
	if d.params["host"] == "" {
		return nil
	}
	return strings.Split(d.params["host"], ",")
}

// check refuses what lib/pq would read differently from libpq.
func (d dsn) check() error {
	hosts := d.hosts()
	for _, h := range hosts {
		if _, err := netip.ParseAddr(h); err != nil && strings.Contains(h, ":") {
			return fmt.Errorf("DATABASE_URL: host %q contains a port; lib/pq would look up %q as a host name. Write %s, or port=5433 in key=value form", h, h, multiHostForm)
		}
	}
	if ports := d.params["port"]; ports != "" && len(hosts) > 0 {
		if n := len(strings.Split(ports, ",")); n != 1 && n != len(hosts) {
			return fmt.Errorf("DATABASE_URL: %d ports for %d hosts; give one port for all or one per host", n, len(hosts))
		}
	}
	if len(hosts) > 1 {
		switch tsa := d.params["target_session_attrs"]; tsa {
		case "read-write", "primary":
		case "":
			return fmt.Errorf("DATABASE_URL lists %d hosts but no target_session_attrs: the service writes, so add target_session_attrs=read-write (%s); otherwise it may connect to a standby", len(hosts), multiHostForm)
		default:
			return fmt.Errorf("DATABASE_URL: target_session_attrs=%s may connect to a standby; the service writes, so use read-write (%s)", tsa, multiHostForm)
		}
	}
	return nil
}

// withDefault is d with k set to v unless the operator gave it. d itself is left as it was
// (the pools' DSN adds to the direct sessions' one).
func (d dsn) withDefault(k, v string) dsn {
	if _, ok := d.params[k]; ok {
		return d
	}
	params := maps.Clone(d.params)
	params[k] = v
	return dsn{params: params}
}

// listening is d for a LISTEN session held for the process's life: its application_name (the
// operator's, else "backfill") gains suffix, so that pg_stat_activity, and a count of a
// replica's pool sessions by name, tell it from the pools' sessions.
func (d dsn) listening(suffix string) dsn {
	params := maps.Clone(d.params)
	base := params["application_name"]
	if base == "" {
		base = "backfill"
	}
	params["application_name"] = base + suffix
	return dsn{params: params}
}

// String is the key=value form lib/pq reads, keys sorted so that it is stable.
func (d dsn) String() string { return d.format(false) }

// Redacted is String with the password masked, for the startup log.
func (d dsn) Redacted() string { return d.format(true) }

func (d dsn) format(redact bool) string {
	keys := make([]string, 0, len(d.params))
	for k := range d.params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := d.params[k]
		if redact && k == "password" {
			v = "xxxxx"
		}
		parts = append(parts, k+"='"+esc.Replace(v)+"'")
	}
	return strings.Join(parts, " ")
}

// connector validates the DSN with lib/pq itself (ports that do not match the hosts, unknown
// sslmode, ...) and returns lib/pq's connector for it.
func (d dsn) connector() (*pq.Connector, error) {
	c, err := pq.NewConnector(d.String())
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return c, nil
}

// redactedDSN is the DSN as the service reads it, password masked, for the startup log.
func redactedDSN(raw string) string {
	if raw == "" {
		return ""
	}
	d, err := parseDSN(raw)
	if err != nil {
		return "(unparseable DSN, not shown)"
	}
	return d.Redacted()
}
