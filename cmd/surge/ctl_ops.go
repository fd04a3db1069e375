package main

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/spf13/cobra"
)

// The ctl commands of the server, ticketing, commerce and the sequencer;
// their answers' shapes are in docs/API.md (Operator reads and each
// workload's routes).

type opsOverview struct {
	Healthy bool `json:"healthy"`
	Node    struct {
		NodeID        string `json:"nodeId"`
		Mode          string `json:"mode"`
		Cluster       string `json:"cluster"`
		UptimeSeconds int64  `json:"uptimeSeconds"`
		Partitions    int    `json:"partitions"`
	} `json:"node"`
	Partitions []struct {
		Partition      int     `json:"partition"`
		Served         bool    `json:"served"`
		Owner          string  `json:"owner"`
		QueueDepth     int     `json:"queueDepth"`
		Applied        uint64  `json:"applied"`
		Batches        uint64  `json:"batches"`
		MeanBatch      float64 `json:"meanBatch"`
		RecentBatch    float64 `json:"recentBatch"`
		RecentApplyMs  float64 `json:"recentApplyMs"`
		RecentCommitMs float64 `json:"recentCommitMs"`
		Position       uint64  `json:"position"`
		Lag            *int64  `json:"lag"`
	} `json:"partitions"`
	Memory struct {
		InUse    uint64   `json:"inUse"`
		Heap     uint64   `json:"heap"`
		Limit    *int64   `json:"limit"`
		Fraction *float64 `json:"fraction"`
	} `json:"memory"`
	GC struct {
		Cycles      int64   `json:"cycles"`
		LastPauseMs float64 `json:"lastPauseMs"`
		Goroutines  int     `json:"goroutines"`
	} `json:"gc"`
	Errors []struct {
		Time  string            `json:"time"`
		Level string            `json:"level"`
		Msg   string            `json:"msg"`
		Attrs map[string]string `json:"attrs"`
	} `json:"errors"`
	ErrorsTotal int `json:"errorsTotal"`
}

type opsCluster struct {
	Cluster    string `json:"cluster"`
	NodeID     string `json:"nodeId"`
	Advertise  string `json:"advertise"`
	Partitions int    `json:"partitions"`
	Owned      []int  `json:"owned"`
	Owners     map[string]struct {
		NodeID string `json:"nodeId"`
		Addr   string `json:"addr"`
	} `json:"owners"`
	Members []struct {
		NodeID string `json:"nodeId"`
		Addr   string `json:"addr"`
	} `json:"members"`
}

func ctlOverviewCmd(o *ctlOptions) *cobra.Command {
	cmd := leaf("overview", "Show this node: partitions, memory, GC and the newest warnings and errors", 0, nil)
	w := addWatch(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, w, getView[opsOverview]("/v1/admin/overview"), printOverview)
	}
	return cmd
}

// clusterView is what `ctl cluster` shows: the cluster's nodes and
// owners, and this node's partitions with their lag.
type clusterView struct {
	Cluster  *opsCluster  `json:"cluster"`
	Overview *opsOverview `json:"overview"`
}

func ctlClusterCmd(o *ctlOptions) *cobra.Command {
	cmd := leaf("cluster", "Show the cluster's nodes, which node owns each partition, and the lag of this node's", 0, nil)
	w := addWatch(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, w, func(ctx context.Context, c *ctlHTTP) (*clusterView, any, error) {
			v := &clusterView{Cluster: &opsCluster{}, Overview: &opsOverview{}}
			if _, err := c.get(ctx, "/v1/cluster", v.Cluster); err != nil {
				if statusOf(err) == http.StatusNotFound {
					return nil, nil, &httpStatusError{http.StatusNotFound, "the server is not a node of a cluster (it serves no /v1/cluster): see surge ctl overview"}
				}
				return nil, nil, err
			}
			if _, err := c.get(ctx, "/v1/admin/overview", v.Overview); err != nil {
				return nil, nil, err
			}
			return v, v, nil
		}, printCluster)
	}
	return cmd
}

// pageFlags are a list's --after and --limit.
type pageFlags struct {
	after string
	limit int
}

func addPage(cmd *cobra.Command, what string, def, max int) *pageFlags {
	p := &pageFlags{}
	cmd.Flags().StringVar(&p.after, "after", "", "start after this "+what+" (the next page's cursor a previous list printed)")
	limitFlag(cmd, &p.limit, def, max)
	return p
}

func (p *pageFlags) query() []string { return withLimit([]string{"after", p.after}, p.limit) }

// limitFlag is a list's --limit, for lists with a cursor (addPage) and
// without one.
func limitFlag(cmd *cobra.Command, limit *int, def, max int) {
	cmd.Flags().IntVar(limit, "limit", 0, "at most this many, 1 to "+strconv.Itoa(max)+"; 0: the server's default ("+strconv.Itoa(def)+")")
}

// withLimit adds limit to a query unless it is 0 (the server's default).
func withLimit(q []string, limit int) []string {
	if limit != 0 {
		q = append(q, "limit", strconv.Itoa(limit))
	}
	return q
}

func ctlEventCmd(o *ctlOptions) *cobra.Command {
	ev := groupCmd("event", "List events with their sell-through, show one, draw an area's seat map")
	list := leaf("list", "List the events by name, a page at a time", 0, nil)
	pg, w := addPage(list, "event name", 20, 100), addWatch(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, w, getView[opsEvents]("/v2/events", pg.query()...), printEvents)
	}
	show := leaf("show EVENT", "Show an event and each area's available and reserved seats", 1, nil)
	sw := addWatch(show)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, sw, getView[opsEvent]("/v2/events/"+esc(args[0])), printEvent)
	}
	seats := leaf("seats EVENT AREA", "Draw an area's seat map: # sold, . free", 2, nil)
	mw := addWatch(seats)
	seats.RunE = func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, mw, getView[opsSeatMap]("/v2/events/"+esc(args[0])+"/areas/"+esc(args[1])+"/seats"), printSeatMap)
	}
	ev.AddCommand(list, show, seats)
	return ev
}

func ctlReservationCmd(o *ctlOptions) *cobra.Command {
	r := groupCmd("reservation", "Show or cancel a reservation")
	r.AddCommand(
		leaf("show ID", "Show a reservation", 1, func(cmd *cobra.Command, args []string) error {
			return ctlView(cmd, o, nil, getView[opsReservation]("/v2/reservations/"+esc(args[0])), printReservation)
		}),
		leaf("cancel ID", "Cancel a reservation: its seats become free", 1, func(cmd *cobra.Command, args []string) error {
			return ctlView(cmd, o, nil, doView[opsReservation](http.MethodDelete, "/v2/reservations/"+esc(args[0])), printReservation)
		}),
	)
	return r
}

func ctlOrderCmd(o *ctlOptions) *cobra.Command {
	ord := groupCmd("order", "List orders (filtered on the server) and show one")
	list := leaf("list", "List orders by id, a page at a time", 0, nil)
	pg, w := addPage(list, "order id", 50, 200), addWatch(list)
	var status, customer string
	list.Flags().StringVar(&status, "status", "", "only orders in this status: PENDING, CONFIRMED or CANCELLED")
	list.Flags().StringVar(&customer, "customer", "", "only this customer's orders")
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		q := append(pg.query(), "status", status, "customerId", customer)
		return ctlView(cmd, o, w, getView[opsOrders]("/api/ops/orders", q...), printOrders)
	}
	show := leaf("show ID", "Show an order", 1, func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, nil, getView[opsOrder]("/api/orders/"+esc(args[0])), printOrder)
	})
	ord.AddCommand(list, show)
	return ord
}

func ctlSagaCmd(o *ctlOptions) *cobra.Command {
	s := groupCmd("saga", "List sagas and show one's timeline")
	list := leaf("list", "List sagas", 0, nil)
	var status string
	var limit int
	list.Flags().StringVar(&status, "status", "", "only sagas in this status (STARTED, IN_PROGRESS, COMPLETED, COMPENSATING, COMPENSATED, FAILED, TIMED_OUT)")
	limitFlag(list, &limit, 100, 1000)
	w := addWatch(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		q := withLimit([]string{"status", status}, limit)
		return ctlView(cmd, o, w, getView[[]opsSaga]("/api/sagas", q...), printSagas)
	}
	show := leaf("show ID", "Show a saga as a timeline: each step, where it ran, compensation marked", 1, nil)
	sw := addWatch(show)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, sw, getView[opsTimeline]("/api/ops/sagas/"+esc(args[0])), printTimeline)
	}
	s.AddCommand(list, show)
	return s
}

func ctlProductCmd(o *ctlOptions) *cobra.Command {
	p := groupCmd("product", "List products with their stock and show one")
	list := leaf("list", "List products with their stock", 0, nil)
	var limit int
	limitFlag(list, &limit, 100, 1000)
	w := addWatch(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		q := withLimit(nil, limit)
		return ctlView(cmd, o, w, getView[[]opsProduct]("/api/products", q...), func(w io.Writer, ps *[]opsProduct) error { return printProducts(w, *ps) })
	}
	show := leaf("show ID", "Show a product and its stock", 1, func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, nil, getView[opsProduct]("/api/products/"+esc(args[0])), func(w io.Writer, p *opsProduct) error {
			return printProducts(w, []opsProduct{*p})
		})
	})
	p.AddCommand(list, show)
	return p
}

func ctlDLQCmd(o *ctlOptions) *cobra.Command {
	d := groupCmd("dlq", "List, show, replay and discard commerce's dead letters (needs commerce:admin)")
	list := leaf("list", "List the oldest parked entries over all partitions", 0, nil)
	var limit int
	limitFlag(list, &limit, 100, 1000)
	w := addWatch(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		q := withLimit(nil, limit)
		return ctlView(cmd, o, w, getView[[]opsDLQEntry]("/api/admin/dlq", q...), func(w io.Writer, es *[]opsDLQEntry) error { return printDLQ(w, *es) })
	}
	one := func(use, short, method, suffix string) *cobra.Command {
		return leaf(use, short, 1, func(cmd *cobra.Command, args []string) error {
			return ctlView(cmd, o, nil, doView[opsDLQEntry](method, "/api/admin/dlq/"+esc(args[0])+suffix), func(w io.Writer, e *opsDLQEntry) error {
				return printDLQ(w, []opsDLQEntry{*e})
			})
		})
	}
	count := leaf("count", "Count the parked entries and what became of the others", 0, func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, nil, getView[opsDLQCount]("/api/admin/dlq/count"), printDLQCount)
	})
	d.AddCommand(list, count,
		one("show ID", "Show a parked entry", http.MethodGet, ""),
		one("replay ID", "Apply a parked step now, exactly once", http.MethodPost, "/replay"),
		one("discard ID", "Drop a parked step; it is never applied", http.MethodDelete, ""))
	return d
}

func ctlGroupCmd(o *ctlOptions) *cobra.Command {
	g := groupCmd("group", "List sequencer groups with their released and held positions, show one")
	list := leaf("list", "List the groups by name, a page at a time", 0, nil)
	pg, w := addPage(list, "group name", 50, 200), addWatch(list)
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, w, getView[opsGroups]("/v1/ops/groups", pg.query()...), printGroups)
	}
	show := leaf("show GROUP", "Show a group: positions, the gap holding it up, its consumers' lag", 1, nil)
	sw := addWatch(show)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, sw, getView[opsGroup]("/v1/ops/groups/"+esc(args[0])), printGroup)
	}
	g.AddCommand(list, show)
	return g
}

func ctlConsumerCmd(o *ctlOptions) *cobra.Command {
	c := groupCmd("consumer", "List a sequencer group's consumers and their lag")
	list := leaf("list GROUP", "List a group's consumers, their committed position and lag", 1, nil)
	w := addWatch(list)
	list.RunE = func(cmd *cobra.Command, args []string) error {
		return ctlView(cmd, o, w, func(ctx context.Context, c *ctlHTTP) (*opsGroup, any, error) {
			g := &opsGroup{}
			if _, err := c.get(ctx, "/v1/ops/groups/"+esc(args[0]), g); err != nil {
				return nil, nil, err
			}
			return g, map[string]any{"group": g.Name, "released": g.Released, "consumers": g.Consumers}, nil
		}, printConsumers)
	}
	c.AddCommand(list)
	return c
}

// addOpsCommands adds the commands of the server and the workloads other
// than jobs.
func addOpsCommands(ctl *cobra.Command, o *ctlOptions) {
	ctl.AddCommand(ctlOverviewCmd(o), ctlClusterCmd(o), ctlEventCmd(o), ctlReservationCmd(o), ctlOrderCmd(o),
		ctlSagaCmd(o), ctlProductCmd(o), ctlDLQCmd(o), ctlGroupCmd(o), ctlConsumerCmd(o))
}

type opsQueues struct {
	Queues []struct {
		Name         string  `json:"name"`
		Paused       bool    `json:"paused"`
		Pending      int64   `json:"pending"`
		Assigned     int64   `json:"assigned"`
		Running      int64   `json:"running"`
		Failed       int64   `json:"failed"`
		Done         int64   `json:"done"`
		DeadLettered int64   `json:"deadLettered"`
		ErrorRate    float64 `json:"errorRate"`
		StartLatency struct {
			Samples int      `json:"samples"`
			P50Ms   *float64 `json:"p50Ms"`
			P95Ms   *float64 `json:"p95Ms"`
			MaxMs   *float64 `json:"maxMs"`
		} `json:"startLatency"`
	} `json:"queues"`
}

func ctlQueueLatencyCmd(o *ctlOptions) *cobra.Command {
	cmd := leaf("latency", "Show every queue's counts and submit→start latency (a Surge server)", 0, nil)
	w := addWatch(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return ctlView(cmd, o, w, getView[opsQueues]("/v1/ops/jobs/queues"), printQueueLatency)
	}
	return cmd
}
