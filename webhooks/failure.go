package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// maxErrorLen bounds what the delivery log keeps of one failure.
const maxErrorLen = 500

// describeFailure is the delivery log's account of a failed attempt: the answer's status,
// or what kept an answer from coming.
func describeFailure(status int, err error) string {
	var refused *RefusedAddressError
	var netErr net.Error
	var msg string
	switch {
	case err == nil && status >= 300 && status < 400:
		msg = fmt.Sprintf("answered %d %s; redirects are not followed", status, http.StatusText(status))
	case err == nil:
		msg = fmt.Sprintf("answered %d %s", status, http.StatusText(status))
	case errors.As(err, &refused):
		msg = refused.Error()
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		msg = "no answer within the time limit: " + err.Error()
	default:
		msg = err.Error()
	}
	if len(msg) > maxErrorLen {
		msg = msg[:maxErrorLen] + "..."
	}
	return msg
}
