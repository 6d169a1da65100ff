package schedule

//go:generate go run gen_zones.go

import (
	"fmt"
	"slices"
	"strings"
)

// maxZoneSuggestions bounds the names an unknown time zone's error offers.
const maxZoneSuggestions = 3

// suggestZones answers the known zone names nearest to an unknown one: those at the least
// edit distance (at most maxZoneSuggestions, in name order), ignoring case, to the whole
// name or to its last part (the city), so that "Europe/Berln", "europe/berlin" and "Berlin"
// all lead to Europe/Berlin. Names further than about a quarter of the input's length are
// not offered: a guess that far off misleads.
func suggestZones(name string) []string {
	q := strings.ToLower(name)
	limit := max(1, len(q)/4)
	type near struct {
		name string
		d    int
	}
	var found []near
	for _, z := range zoneNames {
		lz := strings.ToLower(z)
		d := editDistance(q, lz)
		if i := strings.LastIndexByte(lz, '/'); i >= 0 && !strings.Contains(q, "/") {
			d = min(d, editDistance(q, lz[i+1:]))
		}
		if d <= limit {
			found = append(found, near{z, d})
		}
	}
	slices.SortStableFunc(found, func(a, b near) int { return a.d - b.d })
	out := make([]string, 0, maxZoneSuggestions)
	for _, f := range found {
		// Only the nearest: a second guess one edit further is noise next to the first.
		if len(out) == maxZoneSuggestions || f.d > found[0].d {
			break
		}
		out = append(out, f.name)
	}
	return out
}

// didYouMean is the end of an unknown time zone's error: the nearest names, if any.
func didYouMean(name string) string {
	near := suggestZones(name)
	if len(near) == 0 {
		return `; use an IANA name such as "Europe/Berlin" or "UTC"`
	}
	quoted := make([]string, len(near))
	for i, n := range near {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return "; did you mean " + strings.Join(quoted, " or ") + "?"
}

// editDistance is the Levenshtein distance between a and b, in bytes (zone names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
