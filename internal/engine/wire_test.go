package engine

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

type wireProbe struct{ N int }

type wireProbeWorkload struct{ Workload }

func (wireProbeWorkload) WireTypes() []any { return []any{&wireProbe{}} }

// A machine's "not found" is often a nil pointer, which gob alone cannot
// carry inside an interface.
func TestWireValueCarriesTypedNil(t *testing.T) {
	registerWireTypes(map[uint8]Workload{0: wireProbeWorkload{}})
	for _, v := range []any{(*wireProbe)(nil), &wireProbe{N: 7}, nil} {
		b, err := encodeValue(nil, v)
		if err != nil {
			t.Fatalf("encoding %#v: %v", v, err)
		}
		got, err := decodeValue(b)
		if err != nil {
			t.Fatalf("decoding %#v: %v", v, err)
		}
		switch want := v.(type) {
		case *wireProbe:
			g, ok := got.(*wireProbe)
			if !ok || (want == nil) != (g == nil) || want != nil && *g != *want {
				t.Errorf("%#v came back as %#v", v, got)
			}
		default:
			if got != nil {
				t.Errorf("nil came back as %#v", got)
			}
		}
	}
	if _, err := encodeValue(nil, (*struct{ X int })(nil)); err == nil {
		t.Error("a nil pointer of an unlisted type encoded without error")
	}
}

type wireHidden struct {
	Shown int
	//lint:ignore U1000 never read: it is here for CheckWireTypes to refuse.
	hidden []string
}

type wireNested struct{ In []wireHidden }

type wireList []any

func (l wireList) WireTypes() []any { return l }

func TestCheckWireTypes(t *testing.T) {
	if err := CheckWireTypes(wireList{&wireProbe{}, wireProbe{}, []wireProbe(nil)}); err != nil {
		t.Errorf("exported fields only: %v", err)
	}
	for _, bad := range []wireList{{wireHidden{}}, {&wireNested{}}, {map[string]wireHidden(nil)}, {struct{ F func() }{}}, {nil}} {
		if err := CheckWireTypes(bad); err == nil {
			t.Errorf("%#v passed", bad)
		}
	}
}

// TestRelayedOverloadKeepsItsWait: an overload answered by the owning node
// keeps its predicted wait on the node that relays it, so the client
// there gets the owner's Retry-After, not the 1 s floor.
func TestRelayedOverloadKeepsItsWait(t *testing.T) {
	const wait = 2750 * time.Millisecond
	owner := &overloaded{err: errExpired, wait: wait}
	got := decodeErrAnswer(answerErr(owner))
	if !errors.Is(got, ErrOverloaded) || RetryAfter(got) != wait {
		t.Fatalf("relayed %v: ErrOverloaded %v, RetryAfter %v; want true, %v", got, errors.Is(got, ErrOverloaded), RetryAfter(got), wait)
	}
	// Another error carries no wait, even if its text looks like one.
	other := fmt.Errorf("%w (predicted wait 5s)", ErrClosed)
	if d := RetryAfter(decodeErrAnswer(answerErr(other))); d != 0 {
		t.Fatalf("RetryAfter of a relayed ErrClosed = %v, want 0", d)
	}
}
