package main

import (
	"flag"
	"strings"
)

// levenshtein is the edit distance between a and b (insertions, deletions, substitutions).
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// closest is the candidate nearest to typed, if it is near enough to be a typo: at most a
// third of the word's length (and at least 1) edits away. Ties go to the first candidate.
func closest(typed string, candidates []string) (string, bool) {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := levenshtein(typed, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, len([]rune(typed))/3)
	return best, bestD >= 0 && bestD <= limit
}

// suggestCommand answers "did you mean ...?" for an unknown command typed as args, or "":
// the nearest "noun verb" to the first two words, else the nearest single word (a command
// such as watch, or a noun) to the first one.
func suggestCommand(args []string) string {
	var pairs, words []string
	for _, cmd := range commands {
		if strings.Contains(cmd.name, " ") {
			pairs = append(pairs, cmd.name)
		} else {
			words = append(words, cmd.name)
		}
	}
	words = append(words, nounNames()...)
	if len(args) >= 2 {
		if s, ok := closest(args[0]+" "+args[1], pairs); ok {
			return "did you mean '" + s + "'?"
		}
	}
	if s, ok := closest(args[0], words); ok && s != args[0] {
		return "did you mean '" + s + "'?"
	}
	return ""
}

func nounNames() []string {
	var names []string
	for _, n := range nouns {
		if n.name != "" {
			names = append(names, n.name)
		}
	}
	return names
}

// suggestFlag answers "did you mean --x?" for an unknown flag of fs, or "".
func suggestFlag(fs *flag.FlagSet, typed string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) > 1 {
			names = append(names, f.Name)
		}
	})
	if s, ok := closest(strings.TrimLeft(typed, "-"), names); ok {
		return "did you mean --" + s + "?"
	}
	return ""
}
