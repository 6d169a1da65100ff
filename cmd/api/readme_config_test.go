package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's configuration table names exactly the variables the start-up log line prints
// (logAttrs, logged as "starting"): a setting added to one and not the other fails here.
func TestReadmeConfigTableListsEveryLoggedSetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("the README has no Configuration section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}

	cfg, err := loadConfig(func(k string) string {
		if k == "DATABASE_URL" {
			return "postgres://u:secret@localhost:5432/db?sslmode=disable"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	attrs := cfg.logAttrs()
	for i := 0; i < len(attrs); i += 2 {
		logged = append(logged, strings.ToUpper(attrs[i].(string)))
	}
	slices.Sort(documented)
	slices.Sort(logged)
	if !slices.Equal(documented, logged) {
		t.Fatalf("README configuration table %v\nstart-up log %v", documented, logged)
	}
}
