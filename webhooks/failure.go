package webhooks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"

	"github.com/backfillsvc/backfill/domain"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// classifyFailure is the delivery log's account of a failed attempt: the kind of failure
// only. The error text of a failed dial names addresses (the target's, and the resolver's
// when a lookup fails), which the log, readable by every API client, must not show; the
// status code (the log's status_code) tells the rest of an http_status.
func classifyFailure(status int, err error) domain.DeliveryError {
	var (
		refused   *RefusedAddressError
		dnsErr    *net.DNSError
		netErr    net.Error
		recordErr tls.RecordHeaderError
		alertErr  tls.AlertError
		verifyErr *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		certErr   x509.CertificateInvalidError
	)
	switch {
	case err == nil:
		return domain.DeliveryErrorHTTPStatus
	case errors.As(err, &refused):
		return domain.DeliveryErrorRefusedAddress
	case errors.As(err, &dnsErr):
		return domain.DeliveryErrorDNS
	case errors.As(err, &recordErr), errors.As(err, &alertErr), errors.As(err, &verifyErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &certErr):
		return domain.DeliveryErrorTLS
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return domain.DeliveryErrorTimeout
	default:
		// Refused, reset, or closed before an answer: the connection did not carry one.
		return domain.DeliveryErrorConnectionRefused
	}
}
