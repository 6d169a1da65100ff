package domain

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// What a backfill records of the code it runs and of who created it and why.
const (
	// MaxCodeRefLen bounds code_ref: an image digest ("sha256:" + 64 hex digits, plus a
	// repository) or a git SHA fits with room to spare.
	MaxCodeRefLen = 200
	// MaxActorLen bounds created_by (the X-Actor header).
	MaxActorLen = 200
	// MaxReasonLen bounds reason (a sentence or a ticket).
	MaxReasonLen = 500
)

// ErrInvalidCodeRef means code_ref is empty, longer than MaxCodeRefLen or not printable.
var ErrInvalidCodeRef = errors.New("invalid code_ref")

// ValidateCodeRef answers ErrInvalidCodeRef unless ref is 1..MaxCodeRefLen printable
// characters without spaces: it is handed to programs in their environment and in their
// arguments, where a control character or a space would change what they receive.
func ValidateCodeRef(ref string) error {
	n := utf8.RuneCountInString(ref)
	switch {
	case n == 0:
		return fmt.Errorf("%w: code_ref is empty", ErrInvalidCodeRef)
	case n > MaxCodeRefLen:
		return fmt.Errorf("%w: code_ref has %d characters, at most %d are allowed", ErrInvalidCodeRef, n, MaxCodeRefLen)
	case !Printable(ref, false):
		return fmt.Errorf("%w: code_ref must be printable characters without spaces", ErrInvalidCodeRef)
	}
	return nil
}

// Printable reports whether s is valid UTF-8 of printable characters; spaces only if
// spaces is true.
func Printable(s string, spaces bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r == ' ' && spaces {
			continue
		}
		if !unicode.IsPrint(r) || r == ' ' {
			return false
		}
	}
	return true
}
