package wire

import (
	"errors"
	"testing"
)

type pair struct {
	Name string
	Data []byte
	N    int64
}

func (p *pair) code(c *Coder) {
	c.Str(&p.Name)
	c.Bytes(&p.Data)
	c.I64(&p.N)
}

// coder is what newPair returns: nil for an unknown tag, as commands do.
type coder interface{ code(*Coder) }

func newPair(tag byte) coder {
	if tag == 1 {
		return &pair{}
	}
	return nil
}

func encodePair(p pair) []byte {
	w := Writer{B: []byte{1}}
	p.code(&Coder{W: &w})
	return w.B
}

// One Decoder decodes command after command: a failed decode leaves no
// error for the next, and what was decoded owns its values (the buffer it
// came from is overwritten before the checks).
func TestDecoderReused(t *testing.T) {
	var d Decoder
	a := encodePair(pair{Name: "alpha", Data: []byte("one"), N: -5})
	b := encodePair(pair{Name: "beta", Data: []byte("two"), N: 7})
	cases := []struct {
		data []byte
		want *pair
		err  bool
	}{
		{data: a, want: &pair{Name: "alpha", Data: []byte("one"), N: -5}},
		{data: append(append([]byte{}, b...), 0), err: true}, // a byte after it
		{data: b[:len(b)-1], err: true},                      // truncated
		{data: []byte{9}, err: true},                         // unknown tag
		{data: b, want: &pair{Name: "beta", Data: []byte("two"), N: 7}},
	}
	var got []*pair
	for i, c := range cases {
		buf := append([]byte{}, c.data...)
		v, err := DecodeCommandWith(&d, Reader{B: buf}, newPair, coder.code)
		p, _ := v.(*pair)
		if (err != nil) != c.err {
			t.Fatalf("case %d: err %v, want an error: %v", i, err, c.err)
		}
		if c.err && c.data[0] == 9 && !errors.Is(err, ErrUnknownTag) {
			t.Errorf("case %d: %v, want ErrUnknownTag", i, err)
		}
		clear(buf)
		got = append(got, p)
		if d.r.B != nil || d.r.Err != nil {
			t.Fatalf("case %d: the decoder still refers to what it read (%d bytes left), err %v", i, len(d.r.B), d.r.Err)
		}
	}
	for i, c := range cases {
		if c.want == nil {
			continue
		}
		if p := got[i]; p.Name != c.want.Name || string(p.Data) != string(c.want.Data) || p.N != c.want.N {
			t.Errorf("case %d decoded %+v, want %+v", i, p, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = DecodeCommandWith(&d, Reader{B: a}, newPair, coder.code) }); n > 3 {
		t.Errorf("%v allocations per decode with a kept Decoder, want at most the pair, its name and data", n)
	}
}
