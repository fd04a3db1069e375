package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/clientconn"
)

// The commands beyond jobs call the server's HTTP routes (docs/API.md):
// they have no gRPC service.

// maxCtlAnswer bounds what a command reads of one answer: the largest
// operator read (a page of 200 orders) is far below it.
const maxCtlAnswer = 32 << 20

// Watch bounds: a redraw at most once a second (the console's own rate)
// and at least once an hour.
const (
	minWatch = time.Second
	maxWatch = time.Hour
)

// ctlHTTP calls one server's HTTP routes with the ctl flags' token and CA.
type ctlHTTP struct {
	hc   *http.Client
	base string
}

func (o *ctlOptions) httpClient() (*ctlHTTP, error) {
	if _, err := clientconn.IsHTTPS(o.server); err != nil {
		return nil, usageErrorf("--server %v", err)
	}
	rt, err := clientconn.Configure(&http.Transport{}, o.server, false, o.conn)
	if err != nil {
		return nil, usageError{err}
	}
	return &ctlHTTP{hc: &http.Client{Transport: rt}, base: strings.TrimRight(o.server, "/")}, nil
}

// httpStatusError is a non-2xx answer: its status and the server's message.
type httpStatusError struct {
	status int
	msg    string
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

// call makes one request; a 2xx answer's body is decoded into v (unless
// nil) and returned as it came.
func (c *ctlHTTP) call(ctx context.Context, method, path string, v any) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("DEADLINE_EXCEEDED: %v", err)
		}
		return nil, fmt.Errorf("UNAVAILABLE: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCtlAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, &httpStatusError{resp.StatusCode, e.Error}
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return nil, fmt.Errorf("the answer to %s %s is not what surge ctl expects (%v): is --server a Surge server?", method, path, err)
		}
	}
	return b, nil
}

// get is call for a GET of a path whose query holds the given pairs (an
// empty value leaves its key out).
func (c *ctlHTTP) get(ctx context.Context, path string, v any, query ...string) ([]byte, error) {
	q := url.Values{}
	for i := 0; i+1 < len(query); i += 2 {
		if query[i+1] != "" {
			q.Set(query[i], query[i+1])
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.call(ctx, http.MethodGet, path, v)
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }

// watchOpts are a read command's --watch and --count.
type watchOpts struct {
	every time.Duration
	count int
}

// addWatch gives cmd --watch and --count.
func addWatch(cmd *cobra.Command) *watchOpts {
	w := &watchOpts{}
	cmd.Flags().DurationVar(&w.every, "watch", 0, "redraw every this long (1s to 1h) until interrupted; 0: once")
	cmd.Flags().IntVar(&w.count, "count", 0, "with --watch, stop after this many redraws; 0: until interrupted")
	return w
}

func (w *watchOpts) check() error {
	if w == nil || w.every == 0 {
		return nil
	}
	if w.every < minWatch || w.every > maxWatch {
		return usageErrorf("--watch %v: want %v to %v", w.every, minWatch, maxWatch)
	}
	if w.count < 0 {
		return usageErrorf("--count %d: must not be negative", w.count)
	}
	return nil
}

// ctlView fetches with the HTTP client and prints: the JSON value on one
// line with --json, else text; with --watch again and again.
func ctlView[T any](cmd *cobra.Command, o *ctlOptions, w *watchOpts, fetch func(context.Context, *ctlHTTP) (T, any, error), text func(io.Writer, T) error) error {
	if err := w.check(); err != nil {
		return err
	}
	c, err := o.httpClient()
	if err != nil {
		return err
	}
	once := func() error {
		ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
		defer cancel()
		v, js, err := fetch(ctx, c)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if o.json {
			return printJSONLine(out, js)
		}
		return text(out, v)
	}
	if w == nil || w.every == 0 {
		return once()
	}
	return watch(cmd, w, once)
}

// watch redraws until interrupted or --count redraws are done. On a
// terminal the screen is cleared first; elsewhere (a pipe, a test) each
// redraw starts after a header line.
func watch(cmd *cobra.Command, w *watchOpts, once func() error) error {
	out := cmd.OutOrStdout()
	tty := isTerminal(out)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for i := 0; w.count == 0 || i < w.count; i++ {
		if i > 0 {
			select {
			case <-cmd.Context().Done():
				return nil
			case <-t.C:
			}
		}
		if tty {
			fmt.Fprint(out, "\x1b[H\x1b[2J")
		}
		if !isJSON(cmd) {
			fmt.Fprintf(out, "Every %v: %s  %s\n\n", w.every, cmd.CommandPath(), time.Now().In(ctlZone).Format(time.RFC3339))
		}
		if err := once(); err != nil {
			return err
		}
	}
	return nil
}

func isJSON(cmd *cobra.Command) bool {
	f := cmd.Flag("json")
	return f != nil && f.Value.String() == "true"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printJSONLine writes v as one line: raw answers compacted, anything
// else marshalled.
func printJSONLine(w io.Writer, v any) error {
	var b []byte
	switch x := v.(type) {
	case []byte:
		var buf bytes.Buffer
		if err := json.Compact(&buf, x); err != nil {
			return err
		}
		b = buf.Bytes()
	default:
		var err error
		if b, err = json.Marshal(x); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%s\n", b)
	return err
}

// getView is the fetch of one GET whose answer decodes into T.
func getView[T any](path string, query ...string) func(context.Context, *ctlHTTP) (*T, any, error) {
	return func(ctx context.Context, c *ctlHTTP) (*T, any, error) {
		v := new(T)
		raw, err := c.get(ctx, path, v, query...)
		return v, raw, err
	}
}

// doView is the fetch of one call that changes something (POST, DELETE).
func doView[T any](method, path string) func(context.Context, *ctlHTTP) (*T, any, error) {
	return func(ctx context.Context, c *ctlHTTP) (*T, any, error) {
		v := new(T)
		raw, err := c.call(ctx, method, path, v)
		return v, raw, err
	}
}
