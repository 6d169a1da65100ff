// Package defaults fills in the settings a caller left unset.
package defaults

// Positive sets *v to d when *v is zero or negative. The background services' configs take
// zero for "the default", and a negative interval, batch size or limit means nothing else.
func Positive[T ~int | ~int64 | ~float64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
