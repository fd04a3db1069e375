package ticketing

import (
	"cmp"
	"context"
	"fmt"

	"github.com/surge-run/surge/internal/module"
)

// Module is the ticketing workload as the server runs it.
var Module = module.Module{
	Name: "ticketing",
	Flags: []module.Flag{
		module.Duration("retention", "SURGE_RETENTION", DefaultRetention,
			"how long a FAILED or CANCELLED reservation stays readable (and its Idempotency-Key remembered) before it is purged; 0 keeps them for ever").
			NotNegative("must be 0 (keep for ever) or a positive duration such as 15m"),
		module.Int("max-events", "SURGE_MAX_EVENTS", DefaultMaxEvents,
			"events this server holds at most; creating one more is refused with 409").
			NotNegative("must be positive (or 0 for the default)"),
		module.Int("max-areas", "SURGE_MAX_AREAS", DefaultMaxAreas,
			"areas over all events this server holds at most; an event that would pass it is refused with 409").
			NotNegative("must be positive (or 0 for the default)"),
		module.Int("max-seats", "SURGE_MAX_SEATS", DefaultMaxSeats,
			"seats over all areas this server holds at most; an event that would pass it is refused with 409").
			NotNegative("must be positive (or 0 for the default)"),
	},
	Open: func(env module.Env) (module.Parts, error) {
		return module.Parts{Workload: Workload{}, Serve: func(h module.Host) (module.Served, error) {
			if err := h.Registry.Register(SeatCollector(h.Engine)); err != nil {
				return module.Served{}, err
			}
			return serve(env, h), nil
		}}, nil
	},
}

func serve(env module.Env, h module.Host) module.Served {
	a := NewAPI(h.Engine).SetRetention(env.Settings.Duration("retention"))
	limits := Limits{
		Events: cmp.Or(env.Settings.Int("max-events"), DefaultMaxEvents),
		Areas:  cmp.Or(env.Settings.Int("max-areas"), DefaultMaxAreas),
		Seats:  cmp.Or(env.Settings.Int("max-seats"), DefaultMaxSeats),
	}
	ctx := h.Context
	if env.Clustered {
		// Not one partition is served before the node joins: counting now
		// would wait for owners that cannot come. The count is made at the
		// first event creation instead.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		cancel()
	}
	used, err := a.SetLimits(ctx, limits)
	if err != nil && !env.Clustered {
		// Counted again at the first event creation.
		env.Logger.Warn("could not count the events this server holds", "err", err)
	}
	a.Register(h.Mux, h.Metrics)
	return module.Served{Log: []any{
		"events", fmt.Sprintf("%d/%d", used.Events, limits.Events), "areas", fmt.Sprintf("%d/%d", used.Areas, limits.Areas),
		"seats", fmt.Sprintf("%d/%d", used.Seats, limits.Seats)}}
}
