//go:build unix

package pgrun

import (
	"errors"
	"syscall"
)

// idleAlive reports whether an idle session's socket is still open: nothing is due from the
// server between statements, so data waiting or an end of stream means the session is over
// (a FATAL error such as an administrator's termination, or a closed socket). It peeks without
// waiting and consumes nothing. Go's own Read cannot be used for this: with a deadline already
// passed it fails before looking at the socket.
func (c *countingConn) idleAlive() bool {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = n < 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
		return true
	})
	return err == nil && alive
}
