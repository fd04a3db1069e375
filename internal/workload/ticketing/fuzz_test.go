package ticketing

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire/wiretest"
)

func seedCommands() []engine.Command {
	def := EventDef{EventName: "ev", Artist: "a", ReservationOpeningTime: "2030-01-01T00:00:00Z",
		ReservationClosingTime: "2030-01-02T00:00:00Z", EventStartTime: "2030-01-03T00:00:00Z", EventEndTime: "2030-01-04T00:00:00Z",
		Areas: []AreaDef{{AreaID: "a", Price: 12.5, RowCount: 3, ColCount: 4}}}
	return []engine.Command{
		&CreateEvent{Def: def},
		&CreateArea{EventID: "ev", Area: def.Areas[0]},
		&Reserve{ID: id(1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, Retention: 900e9},
		&Reserve{ID: id(2), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeSelfPick, NumOfSeats: 2,
			Seats: []Seat{{Row: 0, Col: 1}, {Row: 2, Col: 3}}, IdemKey: "k", Strict: true},
		&Cancel{ID: id(3), Retention: 5},
		&Purge{},
	}
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to the
// same bytes (so a logged record means one command), records logged
// before the retention field existed included.
func FuzzDecode(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := c.AppendBinary(nil)
		f.Add(b)
		switch c.(type) {
		case *Reserve, *Cancel: // as logged before retention existed
			f.Add(b[:len(b)-len(binaryUvarint(uint64(retentionOf(c))))])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { wiretest.RoundTrip(t, data, NewMachine().Decode) })
}

func retentionOf(c engine.Command) int64 {
	if r, ok := c.(*Reserve); ok {
		return r.Retention
	}
	return c.(*Cancel).Retention
}
