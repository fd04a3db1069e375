package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The answers the HTTP commands decode, and how they print.

type opsEvents struct {
	Events []struct {
		EventName   string  `json:"eventName"`
		Artist      string  `json:"artist"`
		Areas       int     `json:"areas"`
		Seats       int     `json:"seats"`
		Sold        int     `json:"sold"`
		Available   int     `json:"available"`
		SellThrough float64 `json:"sellThrough"`
	} `json:"events"`
	Next string `json:"next"`
}

type opsEvent struct {
	EventName string `json:"eventName"`
	Artist    string `json:"artist"`
	Areas     []struct {
		AreaID         string      `json:"areaId"`
		Price          json.Number `json:"price"`
		RowCount       int         `json:"rowCount"`
		ColCount       int         `json:"colCount"`
		AvailableSeats int         `json:"availableSeats"`
		ReservedSeats  int         `json:"reservedSeats"`
	} `json:"areas"`
	AvailableSeats int `json:"availableSeats"`
}

type opsSeatMap struct {
	EventID   string `json:"eventId"`
	AreaID    string `json:"areaId"`
	RowCount  int    `json:"rowCount"`
	ColCount  int    `json:"colCount"`
	Seats     int    `json:"seats"`
	Sold      int    `json:"sold"`
	Available int    `json:"available"`
	Bitmap    string `json:"bitmap"`
}

type opsReservation struct {
	ReservationID string `json:"reservationId"`
	UserID        string `json:"userId"`
	EventID       string `json:"eventId"`
	AreaID        string `json:"areaId"`
	NumOfSeats    int    `json:"numOfSeats"`
	Type          string `json:"type"`
	Seats         []struct {
		Row int `json:"row"`
		Col int `json:"col"`
	} `json:"seats"`
	State        string `json:"state"`
	FailedReason string `json:"failedReason"`
}

type opsOrder struct {
	OrderID       string      `json:"orderId"`
	CustomerID    string      `json:"customerId"`
	Status        string      `json:"status"`
	Total         json.Number `json:"total"`
	PaymentID     string      `json:"paymentId"`
	Cancellation  string      `json:"cancellationReason"`
	CreatedAt     string      `json:"createdAt"`
	UpdatedAt     string      `json:"updatedAt"`
	LineItems     []struct{}  `json:"lineItems"`
	PaymentMethod string      `json:"paymentMethod"`
}

type opsOrders struct {
	Orders []opsOrder `json:"orders"`
	Next   string     `json:"next"`
}

type opsSaga struct {
	SagaID        string `json:"sagaId"`
	OrderID       string `json:"orderId"`
	Status        string `json:"status"`
	FailureReason string `json:"failureReason"`
	StartedAt     string `json:"startedAt"`
	UpdatedAt     string `json:"updatedAt"`
}

type opsTimeline struct {
	opsSaga
	Terminal  bool     `json:"terminal"`
	Partition int      `json:"partition"`
	Products  []string `json:"products"`
	DLQ       int      `json:"dlq"`
	Steps     []struct {
		Step         string `json:"step"`
		Status       string `json:"status"`
		At           string `json:"at"`
		Partitions   []int  `json:"partitions"`
		Compensation bool   `json:"compensation"`
	} `json:"steps"`
}

type opsProduct struct {
	ProductID         string      `json:"productId"`
	SKU               string      `json:"sku"`
	Name              string      `json:"name"`
	Price             json.Number `json:"price"`
	QuantityOnHand    int64       `json:"quantityOnHand"`
	QuantityReserved  int64       `json:"quantityReserved"`
	AvailableQuantity int64       `json:"availableQuantity"`
	Status            string      `json:"status"`
}

type opsDLQEntry struct {
	ID            string `json:"id"`
	EventType     string `json:"eventType"`
	OrderID       string `json:"orderId"`
	FailureReason string `json:"failureReason"`
	FailedAt      string `json:"failedAt"`
	Partition     int    `json:"partition"`
	Status        string `json:"status"`
}

type opsDLQCount struct {
	Count        int  `json:"count"`
	FaultEnabled bool `json:"faultEnabled"`
	Parked       int  `json:"parked"`
	Replayed     int  `json:"replayed"`
	Discarded    int  `json:"discarded"`
	Evicted      int  `json:"evicted"`
	Dropped      int  `json:"dropped"`
}

type opsConsumer struct {
	Name     string `json:"name"`
	Position uint64 `json:"position"`
	Lag      uint64 `json:"lag"`
}

type opsGroup struct {
	Name       string `json:"name"`
	Mode       string `json:"mode"`
	Partition  int    `json:"partition"`
	Released   uint64 `json:"released"`
	Last       uint64 `json:"last"`
	Unreleased uint64 `json:"unreleased"`
	Pending    int    `json:"pending"`
	Leased     int    `json:"leased"`
	Held       int    `json:"held"`
	Gap        *struct {
		Seq   uint64 `json:"seq"`
		State string `json:"state"`
	} `json:"gap"`
	Consumers []opsConsumer `json:"consumers"`
}

type opsGroups struct {
	Groups []opsGroup `json:"groups"`
	Next   string     `json:"next"`
}

// fmtStamp shows a server's RFC 3339 time in the operator's zone.
func fmtStamp(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return textCell(s)
	}
	return t.In(ctlZone).Format(time.RFC3339)
}

// fmtBytes shows a size in binary units: 512 B, 1.5 KiB, 73.4 MiB.
func fmtBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func fmtMs(ms float64) string { return fmtDuration(time.Duration(ms * float64(time.Millisecond))) }

func fmtPercent(f float64) string { return fmt.Sprintf("%.1f%%", f*100) }

// nextPage prints a list's cursor when there are more pages.
func nextPage(w io.Writer, next string) error {
	if next == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "Next page: --after %s\n", next)
	return err
}

func printOverview(w io.Writer, o *opsOverview) error {
	if err := printNode(w, o); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := printPartitions(w, o); err != nil {
		return err
	}
	return printErrors(w, o)
}

func printNode(w io.Writer, o *opsOverview) error {
	tw := newTable(w)
	row(tw, "Node:", fmt.Sprintf("%s (%s%s), %d partitions", textCell(o.Node.NodeID), o.Node.Mode, clusterName(o.Node.Cluster), o.Node.Partitions))
	row(tw, "Healthy:", yesNo(o.Healthy))
	row(tw, "Uptime:", (time.Duration(o.Node.UptimeSeconds) * time.Second).String())
	mem := fmtBytes(o.Memory.InUse)
	if o.Memory.Limit != nil && o.Memory.Fraction != nil {
		mem += fmt.Sprintf(" of %s (%s)", fmtBytes(uint64(*o.Memory.Limit)), fmtPercent(*o.Memory.Fraction))
	}
	row(tw, "Memory:", mem+", heap "+fmtBytes(o.Memory.Heap))
	row(tw, "GC:", fmt.Sprintf("%d cycles, last pause %s, %d goroutines", o.GC.Cycles, fmtMs(o.GC.LastPauseMs), o.GC.Goroutines))
	row(tw, "Errors:", fmt.Sprintf("%d logged", o.ErrorsTotal))
	return tw.Flush()
}

func clusterName(c string) string {
	if c == "" {
		return ""
	}
	return " " + c
}

func printPartitions(w io.Writer, o *opsOverview) error {
	tw := newTable(w)
	row(tw, "PARTITION", "OWNER", "QUEUE", "APPLIED", "BATCHES", "MEAN BATCH", "RECENT BATCH", "APPLY", "COMMIT", "LAG")
	for _, p := range o.Partitions {
		lag := "-"
		if p.Lag != nil {
			lag = strconv.FormatInt(*p.Lag, 10)
		}
		if !p.Served {
			row(tw, p.Partition, textCell(p.Owner), "-", "-", "-", "-", "-", "-", "-", lag)
			continue
		}
		row(tw, p.Partition, textCell(p.Owner), p.QueueDepth, p.Applied, p.Batches, fmt.Sprintf("%.2f", p.MeanBatch),
			fmt.Sprintf("%.2f", p.RecentBatch), fmtMs(p.RecentApplyMs), fmtMs(p.RecentCommitMs), lag)
	}
	return tw.Flush()
}

func printErrors(w io.Writer, o *opsOverview) error {
	if len(o.Errors) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "TIME", "LEVEL", "MESSAGE", "ATTRIBUTES")
	for _, e := range o.Errors {
		var attrs []string
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			attrs = append(attrs, k+"="+e.Attrs[k])
		}
		row(tw, fmtStamp(e.Time), e.Level, textCell(e.Msg), textCell(strings.Join(attrs, " ")))
	}
	return tw.Flush()
}

func printCluster(w io.Writer, v *clusterView) error {
	c := v.Cluster
	tw := newTable(w)
	row(tw, "Cluster:", textCell(c.Cluster))
	row(tw, "This node:", textCell(c.NodeID)+" at "+textCell(c.Advertise))
	row(tw, "Partitions:", c.Partitions)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "NODE", "ADDRESS", "OWNS")
	owns := map[string][]string{}
	for p := range c.Partitions {
		if m, ok := c.Owners[strconv.Itoa(p)]; ok {
			owns[m.NodeID] = append(owns[m.NodeID], strconv.Itoa(p))
		}
	}
	for _, m := range c.Members {
		row(tw, textCell(m.NodeID), textCell(m.Addr), orDash(strings.Join(owns[m.NodeID], ",")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printPartitions(w, v.Overview)
}

func printEvents(w io.Writer, p *opsEvents) error {
	tw := newTable(w)
	row(tw, "EVENT", "ARTIST", "AREAS", "SEATS", "SOLD", "AVAILABLE", "SELL-THROUGH")
	for _, e := range p.Events {
		row(tw, textCell(e.EventName), textCell(e.Artist), e.Areas, e.Seats, e.Sold, e.Available, fmtPercent(e.SellThrough))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextPage(w, p.Next)
}

func printEvent(w io.Writer, e *opsEvent) error {
	tw := newTable(w)
	row(tw, "Event:", textCell(e.EventName))
	row(tw, "Artist:", textCell(e.Artist))
	row(tw, "Available:", e.AvailableSeats)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "AREA", "PRICE", "ROWS", "COLS", "RESERVED", "AVAILABLE")
	for _, a := range e.Areas {
		row(tw, textCell(a.AreaID), a.Price, a.RowCount, a.ColCount, a.ReservedSeats, a.AvailableSeats)
	}
	return tw.Flush()
}

// maxSeatMapCols is the widest seat map drawn as a grid; a wider area
// (up to 1000 columns) is summarised per row instead.
const maxSeatMapCols = 200

func printSeatMap(w io.Writer, m *opsSeatMap) error {
	bits, err := base64.StdEncoding.DecodeString(m.Bitmap)
	if err != nil || len(bits)*8 < m.RowCount*m.ColCount {
		return fmt.Errorf("the seat map of %s/%s is not a bitmap of %d seats", m.EventID, m.AreaID, m.RowCount*m.ColCount)
	}
	fmt.Fprintf(w, "Event %s, area %s: %d×%d, %d sold, %d available (%s sold)\n\n", textCell(m.EventID), textCell(m.AreaID),
		m.RowCount, m.ColCount, m.Sold, m.Available, fmtPercent(float64(m.Sold)/float64(max(m.Seats, 1))))
	var line strings.Builder
	for r := range m.RowCount {
		line.Reset()
		sold := 0
		for c := range m.ColCount {
			i := r*m.ColCount + c
			taken := bits[i/8]&(1<<(i%8)) != 0
			if taken {
				sold++
			}
			if m.ColCount <= maxSeatMapCols {
				line.WriteByte(".#"[b2i(taken)])
			}
		}
		if m.ColCount > maxSeatMapCols {
			fmt.Fprintf(w, "row %4d  %d of %d sold\n", r, sold, m.ColCount)
			continue
		}
		fmt.Fprintf(w, "%4d  %s\n", r, line.String())
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func printReservation(w io.Writer, r *opsReservation) error {
	tw := newTable(w)
	row(tw, "Reservation:", r.ReservationID)
	row(tw, "State:", r.State)
	row(tw, "User:", textCell(r.UserID))
	row(tw, "Event:", textCell(r.EventID))
	row(tw, "Area:", textCell(r.AreaID))
	row(tw, "Type:", textCell(r.Type))
	seats := make([]string, len(r.Seats))
	for i, s := range r.Seats {
		seats[i] = fmt.Sprintf("%d:%d", s.Row, s.Col)
	}
	row(tw, "Seats:", orDash(strings.Join(seats, " ")))
	row(tw, "Failed reason:", textCell(r.FailedReason))
	return tw.Flush()
}

func printOrders(w io.Writer, p *opsOrders) error {
	tw := newTable(w)
	row(tw, "ORDER", "STATUS", "CUSTOMER", "TOTAL", "ITEMS", "CREATED")
	for _, o := range p.Orders {
		row(tw, textCell(o.OrderID), o.Status, textCell(o.CustomerID), o.Total, len(o.LineItems), fmtStamp(o.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextPage(w, p.Next)
}

func printOrder(w io.Writer, o *opsOrder) error {
	tw := newTable(w)
	row(tw, "Order:", textCell(o.OrderID))
	row(tw, "Status:", o.Status)
	row(tw, "Customer:", textCell(o.CustomerID))
	row(tw, "Total:", o.Total)
	row(tw, "Items:", len(o.LineItems))
	row(tw, "Payment:", textCell(o.PaymentID))
	row(tw, "Cancelled:", textCell(o.Cancellation))
	row(tw, "Created:", fmtStamp(o.CreatedAt))
	row(tw, "Updated:", fmtStamp(o.UpdatedAt))
	return tw.Flush()
}

func printSagas(w io.Writer, ss *[]opsSaga) error {
	tw := newTable(w)
	row(tw, "SAGA", "STATUS", "STARTED", "UPDATED", "FAILURE")
	for _, s := range *ss {
		row(tw, textCell(s.SagaID), s.Status, fmtStamp(s.StartedAt), fmtStamp(s.UpdatedAt), textCell(s.FailureReason))
	}
	return tw.Flush()
}

func printTimeline(w io.Writer, t *opsTimeline) error {
	tw := newTable(w)
	row(tw, "Saga:", textCell(t.SagaID))
	row(tw, "Status:", t.Status)
	row(tw, "Partition:", t.Partition)
	row(tw, "Started:", fmtStamp(t.StartedAt))
	row(tw, "Updated:", fmtStamp(t.UpdatedAt))
	row(tw, "Failure:", textCell(t.FailureReason))
	row(tw, "Dead letters:", t.DLQ)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	row(tw, "TIME", "STEP", "STATUS", "PARTITIONS", "COMPENSATION")
	for _, s := range t.Steps {
		parts := make([]string, len(s.Partitions))
		for i, p := range s.Partitions {
			parts[i] = strconv.Itoa(p)
		}
		row(tw, fmtStamp(s.At), s.Step, s.Status, strings.Join(parts, ","), yesNo(s.Compensation))
	}
	return tw.Flush()
}

func printProducts(w io.Writer, ps []opsProduct) error {
	tw := newTable(w)
	row(tw, "PRODUCT", "SKU", "NAME", "PRICE", "ON HAND", "RESERVED", "AVAILABLE", "STATUS")
	for _, p := range ps {
		row(tw, textCell(p.ProductID), textCell(p.SKU), textCell(p.Name), p.Price, p.QuantityOnHand, p.QuantityReserved, p.AvailableQuantity, p.Status)
	}
	return tw.Flush()
}

func printDLQ(w io.Writer, es []opsDLQEntry) error {
	tw := newTable(w)
	row(tw, "ENTRY", "STATUS", "EVENT", "ORDER", "PARTITION", "FAILED", "REASON")
	for _, e := range es {
		row(tw, textCell(e.ID), e.Status, textCell(e.EventType), textCell(e.OrderID), e.Partition, fmtStamp(e.FailedAt), textCell(e.FailureReason))
	}
	return tw.Flush()
}

func printDLQCount(w io.Writer, c *opsDLQCount) error {
	tw := newTable(w)
	row(tw, "Parked now:", c.Count)
	row(tw, "Fault injection:", yesNo(c.FaultEnabled))
	row(tw, "Parked ever:", c.Parked)
	row(tw, "Replayed:", c.Replayed)
	row(tw, "Discarded:", c.Discarded)
	row(tw, "Evicted:", c.Evicted)
	row(tw, "Dropped:", c.Dropped)
	return tw.Flush()
}

func fmtGap(g *opsGroup) string {
	if g.Gap == nil {
		return "-"
	}
	return fmt.Sprintf("%d (%s)", g.Gap.Seq, g.Gap.State)
}

func printGroups(w io.Writer, p *opsGroups) error {
	tw := newTable(w)
	row(tw, "GROUP", "MODE", "PARTITION", "RELEASED", "LAST", "PENDING", "LEASED", "HELD", "GAP", "CONSUMERS", "MAX LAG")
	for _, g := range p.Groups {
		var maxLag uint64
		for _, c := range g.Consumers {
			maxLag = max(maxLag, c.Lag)
		}
		row(tw, textCell(g.Name), g.Mode, g.Partition, g.Released, g.Last, g.Pending, g.Leased, g.Held, fmtGap(&g), len(g.Consumers), maxLag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextPage(w, p.Next)
}

func printGroup(w io.Writer, g *opsGroup) error {
	tw := newTable(w)
	row(tw, "Group:", textCell(g.Name))
	row(tw, "Mode:", g.Mode)
	row(tw, "Partition:", g.Partition)
	row(tw, "Released:", g.Released)
	row(tw, "Last:", g.Last)
	row(tw, "Unreleased:", g.Unreleased)
	row(tw, "Pending:", g.Pending)
	row(tw, "Leased:", g.Leased)
	row(tw, "Held:", g.Held)
	row(tw, "Gap:", fmtGap(g))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return printConsumers(w, g)
}

func printConsumers(w io.Writer, g *opsGroup) error {
	tw := newTable(w)
	row(tw, "CONSUMER", "POSITION", "LAG")
	for _, c := range g.Consumers {
		row(tw, textCell(c.Name), c.Position, c.Lag)
	}
	return tw.Flush()
}

func fmtOptMs(ms *float64) string {
	if ms == nil {
		return "-"
	}
	return fmtMs(*ms)
}

func printQueueLatency(w io.Writer, q *opsQueues) error {
	tw := newTable(w)
	row(tw, "QUEUE", "PAUSED", "PENDING", "RUNNING", "FAILED", "DONE", "DEAD", "STARTED", "P50 START", "P95 START", "MAX START")
	for _, x := range q.Queues {
		l := x.StartLatency
		row(tw, textCell(x.Name), yesNo(x.Paused), x.Pending, x.Assigned+x.Running, x.Failed, x.Done, x.DeadLettered,
			l.Samples, fmtOptMs(l.P50Ms), fmtOptMs(l.P95Ms), fmtOptMs(l.MaxMs))
	}
	return tw.Flush()
}
