package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// logicalDates are the slots a create or retry is limited to: --logical-date, repeated, and
// the lines of --logical-dates-file (blank lines and # comments skipped), in that order.
type logicalDates struct {
	dates []time.Time
	file  string
}

func (l *logicalDates) register(fs *flag.FlagSet) {
	fs.Func("logical-date", "run only this slot (`DATE`, as --from-date); repeat for more, at most 10,000 in all", func(s string) error {
		var d dateValue
		if err := d.Set(s); err != nil {
			return err
		}
		l.dates = append(l.dates, d.t)
		return nil
	})
	fs.StringVar(&l.file, "logical-dates-file", "", "run only the slots whose dates this `FILE` lists, one per line")
}

// list is the chosen dates, nil when neither flag was given.
func (l *logicalDates) list() ([]time.Time, error) {
	if l.file == "" {
		return l.dates, nil
	}
	f, err := os.Open(l.file)
	if err != nil {
		return nil, usageErrorf("--logical-dates-file: %v", err)
	}
	defer func() { _ = f.Close() }()
	dates := l.dates
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var d dateValue
		if err := d.Set(line); err != nil {
			return nil, usageErrorf("--logical-dates-file %s line %d: %q: %v", l.file, n, line, err)
		}
		dates = append(dates, d.t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--logical-dates-file %s: %w", l.file, err)
	}
	if dates == nil {
		return nil, usageErrorf("--logical-dates-file %s lists no date", l.file)
	}
	return dates, nil
}
