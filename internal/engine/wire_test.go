package engine

import "testing"

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
	Shown  int
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
