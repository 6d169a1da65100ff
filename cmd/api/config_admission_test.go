package main

import (
	"testing"
	"time"
)

// The admission bound follows the pool unless set, and bad values are refused at start.
func TestAdmissionConfig(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{"DATABASE_URL": "postgres://u@h/db?sslmode=disable"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		name     string
		env      []string
		wait     time.Duration
		inFlight int
		bad      bool
	}{
		{"defaults", nil, 100 * time.Millisecond, 18, false},
		{"pool of 40", []string{"DB_MAX_CONNS", "40"}, 100 * time.Millisecond, 38, false},
		{"small pool keeps three", []string{"DB_MAX_CONNS", "2"}, 100 * time.Millisecond, 3, false},
		{"set", []string{"ADMISSION_WAIT", "250ms", "ADMISSION_MAX_IN_FLIGHT", "64"}, 250 * time.Millisecond, 64, false},
		{"a long wait alone raises the long wait", []string{"ADMISSION_WAIT", "1m"}, time.Minute, 18, false},
		{"wait not a duration", []string{"ADMISSION_WAIT", "100"}, 0, 0, true},
		{"wait zero", []string{"ADMISSION_WAIT", "0s"}, 0, 0, true},
		{"in flight too small", []string{"ADMISSION_MAX_IN_FLIGHT", "2"}, 0, 0, true},
		{"lease pool zero", []string{"DB_LEASE_MAX_CONNS", "0"}, 0, 0, true},
		{"lock wait not a duration", []string{"LOCK_WAIT", "2"}, 0, 0, true},
	}
	for _, c := range cases {
		cfg, err := loadConfig(env(c.env...))
		if c.bad {
			if err == nil {
				t.Errorf("%s: no error", c.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.AdmissionLongWait < cfg.AdmissionWait {
			t.Errorf("%s: long wait %v below the wait %v", c.name, cfg.AdmissionLongWait, cfg.AdmissionWait)
		}
		if cfg.AdmissionWait != c.wait || cfg.AdmissionMaxInFlight != c.inFlight {
			t.Errorf("%s: wait %v in flight %d, want %v and %d", c.name, cfg.AdmissionWait, cfg.AdmissionMaxInFlight, c.wait, c.inFlight)
		}
	}
}
