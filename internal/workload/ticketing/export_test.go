package ticketing

import (
	"time"

	"github.com/surge-run/surge/internal/api"
)

// SetLargeTurns gives a the large answers' turns the test holds: n of
// them, waited for at most patience.
func (a *API) SetLargeTurns(n int, patience time.Duration) *api.Turns {
	a.large = api.NewTurns(n, patience)
	return a.large
}
