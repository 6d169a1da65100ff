package webhooks

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/backfillsvc/backfill/domain"
)

// RefusedAddressError is an attempt refused because the address dialed is one a webhook
// must not reach (domain.RefusedAddressKind): loopback, link-local, unspecified, a cloud
// metadata endpoint or carrier-grade NAT.
type RefusedAddressError struct {
	Addr   netip.Addr
	Reason string
}

func (e *RefusedAddressError) Error() string {
	return fmt.Sprintf("refused to connect to %s: %s address (set WEBHOOK_ALLOW_LOCAL=true to allow)", e.Addr, e.Reason)
}

// checkAddr refuses the addresses domain.RefusedAddressKind names, the same rule that
// registration applies to a literal address.
func checkAddr(addr netip.Addr) error {
	if kind := domain.RefusedAddressKind(addr); kind != "" {
		return &RefusedAddressError{addr.Unmap(), kind}
	}
	return nil
}

// newDialer dials webhook targets. Unless allowLocal, its Control function checks the
// address about to be connected, after name resolution: a name that resolves to a loopback
// address, or that changes what it resolves to between a check and the dial, is still
// refused, which a check of the URL's host name alone would miss.
func newDialer(allowLocal bool) *net.Dialer {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if allowLocal {
		return d
	}
	d.Control = func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("refused to connect to %q: not an IP address and port", address)
		}
		return checkAddr(ap.Addr())
	}
	return d
}
