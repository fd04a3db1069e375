package engine

import (
	"context"
	"fmt"
	"reflect"
)

// Do is Engine.Do for a workload whose replies to cmd are of type R: it
// returns the reply as an R, or an error if the machine replied with
// anything else (a workload bug, reported instead of a panic in the
// caller's type assertion).
func Do[R any](ctx context.Context, e *Engine, part int, wl uint8, cmd Command) (R, error) {
	v, err := e.Do(ctx, part, wl, cmd)
	if err != nil {
		var zero R
		return zero, err
	}
	return as[R](wl, cmd, v)
}

// Query is Engine.Query for a question whose answers are of type R, with
// Do's check. A nil answer is R's zero value.
func Query[R any](ctx context.Context, e *Engine, part int, wl uint8, q any) (R, error) {
	v, err := e.Query(ctx, part, wl, q)
	if err != nil {
		var zero R
		return zero, err
	}
	return as[R](wl, q, v)
}

func as[R any](wl uint8, asked, v any) (R, error) {
	r, ok := v.(R)
	if !ok && v != nil {
		return r, fmt.Errorf("engine: workload %d answered %T with a %T, not a %v", wl, asked, v, reflect.TypeFor[R]())
	}
	return r, nil
}

// QueryAll is Engine.QueryAll for a question whose answers are of type R,
// with Query's check on every partition's answer.
func QueryAll[R any](ctx context.Context, e *Engine, wl uint8, q any) ([]R, error) {
	vs, err := e.QueryAll(ctx, wl, q)
	if err != nil {
		return nil, err
	}
	out := make([]R, len(vs))
	for i, v := range vs {
		if out[i], err = as[R](wl, q, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}
