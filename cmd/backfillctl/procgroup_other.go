//go:build !unix

package main

import (
	"context"
	"errors"
)

// run is not available here: stopping a program with everything it started needs process
// groups.
func (p programRun) run(ctx context.Context) error {
	return errors.New("executor -- <program> needs a Unix system (process groups)")
}
