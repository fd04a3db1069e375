package bench

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestParseReservationMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		string(nullReservation),
		`{"reservationId":"x","seats":[],"state":"FAILED","failedReason":"no 3 continuous seats","areaId":"17"}`,
		` { "state" : "RESERVED" , "seats" : [ { "col" : 4 , "row" : 2 , "x":[1,{"y":null}] } ,{"row":2,"col":5}],` +
			` "extra": {"a": [true, false, -1.5e3, "q\"\\"]}, "areaId": "3", "numOfSeat": 0 }` + "\n",
		`{"state":"FAILED","seats":null,"areaId":null,"failedReason":"sold out"}`,
	} {
		var want struct {
			State        string `json:"state"`
			AreaID       string `json:"areaId"`
			FailedReason string `json:"failedReason"`
			Seats        []Seat `json:"seats"`
		}
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var got reservationReply
		if err := parseReservation([]byte(in), &got); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if string(got.state) != want.State || string(got.areaID) != want.AreaID ||
			string(got.failedReason) != want.FailedReason || !slices.Equal(got.seats, want.Seats) && len(want.Seats)+len(got.seats) > 0 {
			t.Errorf("%s:\n got %q %q %q %v\nwant %+v", in, got.state, got.areaID, got.failedReason, got.seats, want)
		}
	}
}

func TestParseReservationRejectsMalformed(t *testing.T) {
	for _, in := range []string{
		``, `{`, `[]`, `{"state":"RESERVED"`, `{"state":"RESERVED"} x`, `{"state":RESERVED}`,
		`{"seats":[{"row":-1,"col":0}]}`, `{"seats":[{"row":1.5,"col":0}]}`, `{"seats":[{"row":1}]}`,
		`{"seats":[{"row":99999999999,"col":0}]}`, `{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"a":tru}`, `{"a":"x` + "\x01" + `"}`, `{"a":1,}`,
	} {
		var r reservationReply
		if err := parseReservation([]byte(in), &r); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

func TestParseReservationDoesNotAllocate(t *testing.T) {
	var r reservationReply
	_ = parseReservation(nullReservation, &r)
	if n := testing.AllocsPerRun(100, func() { _ = parseReservation(nullReservation, &r) }); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}
