//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth answers the columns of w when it is a terminal. The window-size ioctl
// succeeds only on a terminal, so it doubles as the is-a-terminal check; golang.org/x/sys
// is already a dependency, golang.org/x/term is not.
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	return int(ws.Col), true
}
