package commerce

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// The peer answers every error as {"message", "errorCode", "timestamp",
// "details"}; its clients read those fields. Every commerce route answers
// its errors in that shape, plus "error" (the same text as "message"),
// which Surge's own clients and tests read on every route family.

// routes registers handlers whose errors have the peer's shape.
type routes struct{ m *api.Metrics }

func (rt routes) Handle(mux *http.ServeMux, pattern string, h api.HandlerFunc) {
	codes := errorCodesOf(pattern)
	rt.m.Handle(mux, pattern, func(w http.ResponseWriter, r *http.Request) int {
		return h(&peerErrorWriter{ResponseWriter: w, codes: codes}, r)
	})
}

// HandleFallback keeps the server-wide fallback: a path that matches no
// route is no commerce route.
func (rt routes) HandleFallback(mux *http.ServeMux) { rt.m.HandleFallback(mux) }

// errorCodes are a route family's codes for the statuses whose code
// depends on what the route is about.
type errorCodes struct{ notFound, conflict string }

// errorCodesOf names the codes the peer's service for pattern's path uses:
// <ENTITY>_NOT_FOUND, and for a conflict its own reason (stock, an order's
// or a payment's state).
func errorCodesOf(pattern string) *errorCodes {
	path := pattern[strings.IndexByte(pattern, ' ')+1:]
	family, _, _ := strings.Cut(strings.TrimPrefix(path, "/api/"), "/")
	switch family {
	case "customers":
		return &errorCodes{"CUSTOMER_NOT_FOUND", "INVALID_CUSTOMER_STATE"}
	case "products":
		return &errorCodes{"PRODUCT_NOT_FOUND", "INSUFFICIENT_STOCK"}
	case "orders":
		return &errorCodes{"ORDER_NOT_FOUND", "INVALID_ORDER_STATE"}
	case "sagas":
		return &errorCodes{"SAGA_NOT_FOUND", "CONFLICT"}
	case "payments":
		return &errorCodes{"PAYMENT_NOT_FOUND", "INVALID_PAYMENT_STATE"}
	}
	return &errorCodes{"NOT_FOUND", "CONFLICT"}
}

func (c *errorCodes) of(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "VALIDATION_ERROR"
	case http.StatusNotFound:
		return c.notFound
	case http.StatusConflict:
		return c.conflict
	case http.StatusRequestEntityTooLarge:
		return "PAYLOAD_TOO_LARGE"
	case http.StatusUnsupportedMediaType:
		return "UNSUPPORTED_MEDIA_TYPE"
	case http.StatusUnprocessableEntity:
		return "UNPROCESSABLE_ENTITY"
	case http.StatusTooManyRequests:
		return "TOO_MANY_REQUESTS"
	case http.StatusInternalServerError:
		return "INTERNAL_ERROR"
	case http.StatusServiceUnavailable:
		return "SERVICE_UNAVAILABLE"
	}
	return "HTTP_" + strconv.Itoa(status)
}

// peerErrorWriter gives api.Error the peer's shape (api.ErrorShaper).
type peerErrorWriter struct {
	http.ResponseWriter
	codes *errorCodes
}

// Unwrap lets http.ResponseController (streams, long polls) reach the
// server's writer.
func (p *peerErrorWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// AppendError implements api.ErrorShaper. details is null: the peer fills
// it only for field-by-field validation, and Surge names the one field
// at fault in the message.
func (p *peerErrorWriter) AppendError(b []byte, status int, msg string) []byte {
	b = append(b, `{"message":`...)
	b = api.AppendString(b, msg)
	b = append(b, `,"errorCode":`...)
	b = api.AppendString(b, p.codes.of(status))
	b = append(b, `,"timestamp":`...)
	b = api.AppendString(b, stamp(time.Now().UnixNano()))
	b = append(b, `,"details":null,"error":`...)
	b = api.AppendString(b, msg)
	return append(b, "}\n"...)
}
