package wire

import (
	"testing"
	"unsafe"
)

// A shared reader's strings are substrings of its source and read the
// same values as a copying reader's.
func TestSharedReaderStr(t *testing.T) {
	var w Writer
	w.Str("alpha")
	w.Str("")
	w.Str("gamma")
	src := string(w.B)
	r := SharedReader(src)
	c := Reader{B: w.B}
	for i := 0; i < 3; i++ {
		a, b := r.Str(), c.Str()
		if a != b {
			t.Fatalf("string %d: shared %q, copy %q", i, a, b)
		}
		if len(a) > 0 {
			off := uintptr(unsafe.Pointer(unsafe.StringData(a))) - uintptr(unsafe.Pointer(unsafe.StringData(src)))
			if off >= uintptr(len(src)) {
				t.Fatalf("string %d was copied, not shared", i)
			}
		}
	}
	if r.Err != nil || len(r.B) != 0 {
		t.Fatalf("err %v, %d left", r.Err, len(r.B))
	}
	r.Str()
	if r.Err == nil {
		t.Fatal("reading past the end gave no error")
	}
}
