package main

import (
	"context"
	"errors"
	"fmt"

	"net/http"

	"github.com/spf13/cobra"
)

// printSurgeStatus adds to `ctl status` what a Surge server serves beyond
// jq's API: the node and a line per workload. A server without these
// routes (a jq server) adds nothing; a section the token may not read says
// so instead of failing the command.
func printSurgeStatus(cmd *cobra.Command, o *ctlOptions) error {
	c, err := o.httpClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	w := cmd.OutOrStdout()
	var ov opsOverview
	if _, err := c.get(ctx, "/v1/admin/overview", &ov); err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil
		}
		return err
	}
	fmt.Fprintln(w)
	if err := printNode(w, &ov); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := printPartitions(w, &ov); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	for _, s := range []struct {
		name string
		line func(context.Context, *ctlHTTP) (string, error)
	}{{"Ticketing:", ticketingLine}, {"Commerce:", commerceLine}, {"Sequencer:", sequencerLine}} {
		line, err := s.line(ctx, c)
		if err != nil {
			switch statusOf(err) {
			case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
				line = "- (" + err.Error() + ")"
			default:
				return err
			}
		}
		row(tw, s.name, line)
	}
	return tw.Flush()
}

// statusOf is the HTTP status of a failed call, 0 if it got none.
func statusOf(err error) int {
	var he *httpStatusError
	if errors.As(err, &he) {
		return he.status
	}
	return 0
}

// Each workload's line reads one page at most: "100+" says there are more.
const statusPage = "100"

func more(n int, next string) string {
	if next != "" {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}

func ticketingLine(ctx context.Context, c *ctlHTTP) (string, error) {
	var p opsEvents
	if _, err := c.get(ctx, "/v2/events", &p, "limit", statusPage); err != nil {
		return "", err
	}
	seats, sold := 0, 0
	for _, e := range p.Events {
		seats += e.Seats
		sold += e.Sold
	}
	return fmt.Sprintf("%s events, %d of %d seats sold (%s)", more(len(p.Events), p.Next), sold, seats,
		fmtPercent(float64(sold)/float64(max(seats, 1)))), nil
}

func commerceLine(ctx context.Context, c *ctlHTTP) (string, error) {
	counts := map[string]string{}
	for _, st := range []string{"PENDING", "CONFIRMED", "CANCELLED"} {
		var p opsOrders
		if _, err := c.get(ctx, "/api/ops/orders", &p, "limit", "200", "status", st); err != nil {
			return "", err
		}
		counts[st] = more(len(p.Orders), p.Next)
	}
	line := fmt.Sprintf("orders %s pending, %s confirmed, %s cancelled", counts["PENDING"], counts["CONFIRMED"], counts["CANCELLED"])
	var d opsDLQCount
	if _, err := c.get(ctx, "/api/admin/dlq/count", &d); err == nil {
		line += fmt.Sprintf("; %d dead letters", d.Count)
	}
	return line, nil
}

func sequencerLine(ctx context.Context, c *ctlHTTP) (string, error) {
	var p opsGroups
	if _, err := c.get(ctx, "/v1/ops/groups", &p, "limit", statusPage); err != nil {
		return "", err
	}
	held, gaps := 0, 0
	var lag uint64
	for _, g := range p.Groups {
		held += g.Held
		if g.Gap != nil && g.Gap.State == "unpublished" {
			gaps++
		}
		for _, c := range g.Consumers {
			lag = max(lag, c.Lag)
		}
	}
	return fmt.Sprintf("%s groups, %d held by a missing seq, %d messages held, consumer lag up to %d", more(len(p.Groups), p.Next), gaps, held, lag), nil
}
