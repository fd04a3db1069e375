package api

// WithRouteHook returns a view of m that also calls hook with the pattern
// of every route registered through it, before the route is registered:
// the server gives each route its scope there, so that no route can be
// registered without one (the hook panics on a route it cannot place).
func (m *Metrics) WithRouteHook(hook func(pattern string)) *Metrics {
	v := &Metrics{onRoute: hook}
	if m != nil {
		v.stats, v.panics, v.lean = m.stats, m.panics, m.lean
	}
	return v
}
