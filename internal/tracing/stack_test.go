package tracing

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"unsafe"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// maxWrapperStack bounds the stack the server span wrapper adds to a
// request it does not trace. Every request's goroutine carries it at its
// deepest point (a body read parked in the HTTP/2 server), and a frame
// of about 1 KB there made the untraced 99 % outgrow their first stack
// and copy it: +8 % CPU per reservation at 1 % sampling.
const maxWrapperStack = 256

// The wrapper adds at most maxWrapperStack bytes of stack to a request
// it does not trace. Frame sizes are fixed at compile time, so this is a
// measure, not a timing.
func TestUntracedRequestAddsLittleStack(t *testing.T) {
	tr := New(sdktrace.NewTracerProvider())
	tr.edgeRatio = 0 // nothing sampled, as 99 % at 1 %
	var top, deepest uintptr
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		var marker byte
		deepest = addrOf(&marker)
	})
	req := httptest.NewRequest("POST", "/v1/x", nil)
	w := httptest.NewRecorder()
	depth := func(h http.Handler) uintptr {
		growStack(64) // so that no stack copy moves the frames in between
		var marker byte
		top = addrOf(&marker)
		h.ServeHTTP(w, req)
		return top - deepest
	}
	bare, wrapped := depth(next), depth(tr.Handler(next))
	if bare > 1<<16 || wrapped > 1<<16 {
		t.Fatalf("implausible depths %d and %d bytes: a marker left the stack", bare, wrapped)
	}
	if added := wrapped - bare; added > maxWrapperStack {
		t.Errorf("the wrapper adds %d bytes of stack to an untraced request, want ≤ %d", added, maxWrapperStack)
	}
}

//go:noinline
func addrOf(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

//go:noinline
func growStack(n int) byte {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return growStack(n-1) + pad[n%len(pad)]
}
