//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"io"
	"os"
)

// terminalWidth treats a character device as a terminal of unknown width (80 columns).
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return 0, false
	}
	return 0, true
}
