package forward

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// grpcCodes are the gRPC status codes' names and the HTTP statuses they
// count as (grpc-gateway's mapping): a gRPC error travels in a 200's
// trailers, and counting it as the 200 would hide every failure of a gRPC
// function from its records, metrics and alerts.
var grpcCodes = [...]struct {
	name string
	http int
}{
	{"OK", http.StatusOK},
	{"Canceled", StatusClientClosedRequest},
	{"Unknown", http.StatusInternalServerError},
	{"InvalidArgument", http.StatusBadRequest},
	{"DeadlineExceeded", http.StatusGatewayTimeout},
	{"NotFound", http.StatusNotFound},
	{"AlreadyExists", http.StatusConflict},
	{"PermissionDenied", http.StatusForbidden},
	{"ResourceExhausted", http.StatusTooManyRequests},
	{"FailedPrecondition", http.StatusBadRequest},
	{"Aborted", http.StatusConflict},
	{"OutOfRange", http.StatusBadRequest},
	{"Unimplemented", http.StatusNotImplemented},
	{"Internal", http.StatusInternalServerError},
	{"Unavailable", http.StatusServiceUnavailable},
	{"DataLoss", http.StatusInternalServerError},
	{"Unauthenticated", http.StatusUnauthorized},
}

// grpcError reports a gRPC answer's error: the HTTP status it counts as
// and its words ("grpc-status 5 NotFound: no such user"). ok is false for
// an answer that is not gRPC's, or succeeded, and for another status
// than 200, which counts as itself.
func grpcError(resp *http.Response) (code int, msg string, ok bool) {
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/grpc") {
		return 0, "", false
	}
	// In the trailers; in the head of a trailers-only answer.
	status, where := resp.Trailer.Get("Grpc-Status"), resp.Trailer
	if status == "" {
		status, where = resp.Header.Get("Grpc-Status"), resp.Header
	}
	n, err := strconv.Atoi(status)
	switch {
	case status == "":
		return http.StatusBadGateway, "gRPC answer without grpc-status", true
	case err != nil || n < 0 || n >= len(grpcCodes):
		return http.StatusInternalServerError, "grpc-status " + status, true
	case n == 0:
		return 0, "", false
	}
	msg = "grpc-status " + status + " " + grpcCodes[n].name
	if m := where.Get("Grpc-Message"); m != "" {
		if unescaped, err := url.PathUnescape(m); err == nil {
			m = unescaped
		}
		msg += ": " + m
	}
	return grpcCodes[n].http, msg, true
}
