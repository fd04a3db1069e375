package ticketing

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestFastParserAgreesWithEncodingJSON mutates valid bodies at random:
// whenever the fast path accepts an input, encoding/json must accept it
// too and decode exactly the same values.
func TestFastParserAgreesWithEncodingJSON(t *testing.T) {
	seeds := []string{
		`{"userId":"user123","eventId":"event-1","areaId":"17","numOfSeats":3,"type":"RANDOM"}`,
		` { "userId" : "u", "eventId":"e","areaId":"a","seats":[{"row":1,"col":2},{"col":-3,"row":0}],"type":"SELF_PICK","numOfSeats":null } `,
		`{"seats":[],"numOfSeats":-0,"type":null}`,
		`{}`,
	}
	alphabet := []byte(`{}[]":,-0123456789.eE \nnul"\\é`)
	rng := rand.New(rand.NewPCG(5, 6))
	accepted := 0
	for i := 0; i < 200000; i++ {
		b := []byte(seeds[rng.IntN(len(seeds))])
		for range rng.IntN(3) {
			p := rng.IntN(len(b) + 1)
			switch rng.IntN(3) {
			case 0:
				if p < len(b) {
					b = append(b[:p], b[p+1:]...)
				}
			case 1:
				b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
			default:
				if p < len(b) {
					b[p] = alphabet[rng.IntN(len(alphabet))]
				}
			}
		}
		var fast, std reserveBody
		if !parseReserveFast(b, &fast) {
			continue
		}
		accepted++
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json says %v", b, err)
		}
		if len(fast.Seats) == 0 && len(std.Seats) == 0 {
			fast.Seats, std.Seats = nil, nil
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", b, fast, std)
		}
	}
	if accepted < 1000 {
		t.Fatalf("fast path accepted only %d inputs", accepted)
	}
}

func BenchmarkParseReserve(b *testing.B) {
	body := []byte(`{"userId":"user123","eventId":"event-0b8f7a4e-3b1c-4f7e-9d7a-2a1f0c9e8d7b","areaId":"17","numOfSeats":3,"type":"RANDOM"}`)
	var r reserveBody
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			r.reset()
			parseReserveFast(body, &r)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			r.reset()
			json.Unmarshal(body, &r)
		}
	})
}

// A pooled body is decoded into again: a seat that leaves out a
// coordinate means 0 in it, whatever an earlier request's seat at the
// same place held, on the fast path and on encoding/json's (which a body
// with a field the fast path does not know, like clientRef, takes, and
// which decodes into the array elements it reuses without zeroing them).
func TestReusedBodyForgetsEarlierSeats(t *testing.T) {
	for _, second := range []string{
		`{"eventId":"e","areaId":"a","type":"SELF_PICK","seats":[{"row":1}]}`,
		`{"clientRef":"x","eventId":"e","areaId":"a","type":"SELF_PICK","seats":[{"row":1}]}`,
		`{"clientRef":"x","eventId":"e","areaId":"a","type":"SELF_PICK","seats":[{"col":1}]}`,
	} {
		body := new(reserveBody)
		for _, b := range []string{`{"clientRef":"y","eventId":"e","areaId":"a","seats":[{"row":9,"col":9},{"row":8,"col":7}]}`, second} {
			body.reset()
			if !parseReserveFast([]byte(b), body) {
				body.reset()
				if msg := decodeJSON([]byte(b), body); msg != "" {
					t.Fatalf("%s: %s", b, msg)
				}
			}
		}
		var want reserveBody
		if err := json.Unmarshal([]byte(second), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(body.Seats, want.Seats) {
			t.Errorf("%s decoded into a reused body: seats %+v, want %+v", second, body.Seats, want.Seats)
		}
	}
}
