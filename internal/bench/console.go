package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// ConsolePollInterval is the pause between the end of one refresh of a
// console page and the start of the next, as the console's POLL_MS
// (internal/console/assets/core.js).
const ConsolePollInterval = time.Second

// consoleSeatMaps is how many seat maps the ticketing page reads each
// refresh (SEAT_MAPS_PAGE in internal/console/assets/ticketing.js).
const consoleSeatMaps = 10

// ConsoleReport is what the console's polling cost a spike: the same
// spike against a fresh server while every console page polls it.
type ConsoleReport struct {
	RunReport
	// Requests and Errors count the console's reads during the spike.
	Requests int64 `json:"consoleRequests"`
	Errors   int64 `json:"consoleErrors"`
	// CPUPerReservationChangePercent is the server's CPU per reservation
	// with the console against without it (the flow's own spike), in %.
	CPUPerReservationChangePercent *float64 `json:"cpuPerReservationChangePercent,omitempty"`
}

// consolePoller reads what each page of the console reads, each page on
// its own as a tab of its own would, every ConsolePollInterval: the load
// of an operator with the console open on every page. The reads mirror
// the pages' scripts (internal/console/assets/*.js).
type consolePoller struct {
	base     string
	client   *http.Client
	requests atomic.Int64
	errors   atomic.Int64
	lastErr  atomic.Value // string
}

// pollConsole starts polling base; stop ends it and waits for the pages.
func pollConsole(ctx context.Context, base string) (p *consolePoller, stop func()) {
	p = &consolePoller{base: base, client: &http.Client{Timeout: 30 * time.Second}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, page := range []func(context.Context){p.overview, p.ticketing, p.commerce, p.jobs, p.sequencer} {
		wg.Go(func() {
			for ctx.Err() == nil {
				page(ctx)
				select {
				case <-ctx.Done():
				case <-time.After(ConsolePollInterval):
				}
			}
		})
	}
	return p, func() { cancel(); wg.Wait() }
}

// read GETs path (or with body, POSTs it as Connect JSON) into out.
func (p *consolePoller) read(ctx context.Context, path string, body any, out any) bool {
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, _ := json.Marshal(body)
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, rd)
	if err != nil {
		return p.fail(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	p.requests.Add(1)
	resp, err := p.client.Do(req)
	if err != nil {
		return ctx.Err() == nil && p.fail(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if err == nil && out != nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil {
		return ctx.Err() == nil && p.fail(err)
	}
	return true
}

func (p *consolePoller) fail(err error) bool {
	p.errors.Add(1)
	p.lastErr.Store(err.Error())
	return false
}

func (p *consolePoller) overview(ctx context.Context) {
	p.read(ctx, "/v1/admin/overview", nil, nil)
}

func (p *consolePoller) ticketing(ctx context.Context) {
	var list struct{ Events []struct{ EventName string } }
	if !p.read(ctx, "/v2/events?limit=20", nil, &list) || len(list.Events) == 0 {
		return
	}
	ev := url.PathEscape(list.Events[0].EventName)
	var def struct{ Areas []struct{ AreaID string } }
	if !p.read(ctx, "/v2/events/"+ev, nil, &def) {
		return
	}
	for _, a := range def.Areas[:min(len(def.Areas), consoleSeatMaps)] {
		p.read(ctx, "/v2/events/"+ev+"/areas/"+url.PathEscape(a.AreaID)+"/seats", nil, nil)
	}
}

func (p *consolePoller) commerce(ctx context.Context) {
	for _, path := range []string{"/api/ops/orders?limit=50", "/api/sagas?status=IN_PROGRESS&limit=20",
		"/api/products?limit=20", "/api/admin/dlq/count", "/api/admin/dlq?limit=100"} {
		p.read(ctx, path, nil, nil)
	}
}

func (p *consolePoller) jobs(ctx context.Context) {
	var qs struct{ Queues []struct{ Name string } }
	p.read(ctx, "/v1/ops/jobs/queues", nil, &qs)
	p.read(ctx, "/jq.AdminService/ListWorkers", map[string]any{}, nil)
	if len(qs.Queues) > 0 {
		p.read(ctx, "/jq.JobService/ListJobs", map[string]any{"queueName": qs.Queues[0].Name, "limit": 50}, nil)
	}
}

func (p *consolePoller) sequencer(ctx context.Context) {
	p.read(ctx, "/v1/ops/groups?limit=50", nil, nil)
}

// consoleSpike runs the flow's spike against a fresh server while the
// console polls every page, and compares its CPU per reservation with
// plain's (the same spike without the console).
func (r *ticketingRun) consoleSpike(ctx context.Context, flow string, plain *RunReport) (*ConsoleReport, error) {
	if r.o.Target != "" {
		return nil, fmt.Errorf("--console-poll starts its own server; it does not combine with --target")
	}
	srv, err := r.target(ctx, flow+"-console", "surge-"+flow+"-console", "data-"+flow+"-console", flow+"-console", r.o.ServeArgs...)
	if err != nil {
		return nil, err
	}
	defer srv.proc.kill()
	poller, stop := pollConsole(ctx, srv.base)
	r.logf("%s: the same spike while the console polls every page", flow)
	run, _, err := r.spike(ctx, flow, srv.base, nil, true, nil, srv.cpu(ctx))
	stop()
	if err != nil {
		return nil, err
	}
	run.setPeakRSS(srv.proc, r.logf)
	run.Server = "surge + console"
	cr := &ConsoleReport{RunReport: *run, Requests: poller.requests.Load(), Errors: poller.errors.Load()}
	if cr.Errors > 0 {
		r.logf("warning: %s: %d of the console's %d reads failed (last: %v)", flow, cr.Errors, cr.Requests, poller.lastErr.Load())
	}
	if a, b := perReservation(plain), perReservation(run); a > 0 && b > 0 {
		pct := 100 * (b - a) / a
		cr.CPUPerReservationChangePercent = &pct
	}
	return cr, nil
}

// perReservation is a run's server CPU seconds per reservation, 0 when
// not measured.
func perReservation(r *RunReport) float64 {
	if r == nil || r.ServerCPUSeconds == nil || r.Reservations == 0 {
		return 0
	}
	return *r.ServerCPUSeconds / float64(r.Reservations)
}

// writeConsole prints the console's cost next to the plain spike's.
func writeConsole(out io.Writer, plain *RunReport, c *ConsoleReport) {
	fmt.Fprintf(out, "\nwith the console polling every page (%d reads, %d failed): %s reservations in %.3f s\n",
		c.Requests, c.Errors, grouped(c.Reservations), c.Seconds)
	a, b := perReservation(plain), perReservation(&c.RunReport)
	if a == 0 || b == 0 || c.CPUPerReservationChangePercent == nil {
		fmt.Fprintln(out, "server CPU per reservation: not measured")
		return
	}
	fmt.Fprintf(out, "server CPU per reservation: %.1f µs without the console, %.1f µs with it (%+.1f %%)\n",
		1e6*a, 1e6*b, *c.CPUPerReservationChangePercent)
}
