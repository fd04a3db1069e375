package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/surge-run/surge/internal/auth"
	"github.com/surge-run/surge/internal/server"
)

// waitFor is how long a test waits for a page to show what it should: a
// generous bound for a busy 2-core machine, never a speed assertion.
const waitFor = 45 * time.Second

// Test tokens: an admin of everything and a reader of everything.
const (
	adminToken = "surge_test-admin-token-0123456789abcdefghijklmnop"
	readToken  = "surge_test-read-token-0123456789abcdefghijklmnopq"
)

func tokens(t *testing.T) *auth.Table {
	t.Helper()
	var entries []auth.Entry
	for name, tok := range map[string]string{"ops": adminToken, "viewer": readToken} {
		scope := "*:admin"
		if name == "viewer" {
			scope = "*:read"
		}
		sc, err := auth.ParseScopes(scope)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, auth.Entry{Name: name, Scopes: sc, Hash: auth.Hash(tok)})
	}
	tab, err := auth.NewTable(entries, "")
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// serve runs a real server (server.Run, as `surge serve` does) with the
// console on and edit applied, until the test ends; it returns its base URL.
func serve(t *testing.T, edit func(*server.Config)) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg := server.Config{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 4, UI: true,
		ShutdownTimeout: 20 * time.Second, Ready: ready,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if edit != nil {
		edit(&cfg)
	}
	go func() { errc <- server.Run(ctx, cfg) }()
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		cancel()
		t.Fatalf("server: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the server did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("server.Run: %v", err)
				}
			case <-time.After(40 * time.Second):
				t.Error("the server did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return base, stop
}

var httpc = &http.Client{Timeout: 30 * time.Second}

// call sends a JSON request with token (if any) and decodes the answer
// into out (if not nil); it fails the test unless the status is want.
func call(t *testing.T, method, url, token string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d: %s", method, url, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
}

// chromium installs Debian's chromium if it is missing (as root; the
// project's script) and returns its path.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real Chromium")
	}
	script := filepath.Join("..", "..", "scripts", "chromium.sh")
	if out, err := exec.Command(script, "install").CombinedOutput(); err != nil {
		t.Fatalf("Chromium is needed (Debian: apt-get install chromium; scripts/chromium.sh install does it as root): %v\n%s", err, out)
	}
	out, err := exec.Command(script, "path").Output()
	if err != nil {
		t.Fatalf("scripts/chromium.sh path: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// browser is one headless Chromium with one tab; every console error,
// uncaught exception and failed load it reports is kept for problems.
type browser struct {
	t      *testing.T
	ctx    context.Context
	alloc  context.Context
	mu     sync.Mutex
	errors []string
	loads  int
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	b := &browser{t: t, alloc: alloc}
	b.ctx = b.tab()
	return b
}

// tab opens a new tab (its own sessionStorage) listening for errors.
func (b *browser) tab() context.Context {
	parent := b.alloc
	if b.ctx != nil {
		parent = b.ctx // a tab of the same browser
	}
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithListener(b.listen))
	b.t.Cleanup(cancel)
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		b.t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// listen keeps every error the page reports: exceptions, console.error
// and console.assert, and the browser's own error entries (failed loads,
// refused by the Content-Security-Policy).
func (b *browser) listen(ev any) {
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		b.problem(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, strings.TrimSpace(string(a.Value)+" "+a.Description))
			}
			b.problem("console." + string(ev.Type) + ": " + strings.Join(args, " "))
		}
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.EntryLevelError {
			b.problem(fmt.Sprintf("log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

func (b *browser) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// noProblems fails the test if the browser reported any error so far.
func (b *browser) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Fatalf("the browser reported errors:\n%s", strings.Join(b.errors, "\n"))
	}
}

// signIn makes ctx's tab hold token as a person's tab does after signing
// in (sessionStorage), set before the console's script runs on every page
// it loads.
func (b *browser) signIn(ctx context.Context, token string) {
	b.t.Helper()
	src := fmt.Sprintf(`sessionStorage.setItem('surge.token', %q)`, token)
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: src}); err != nil {
		b.t.Fatalf("signing the tab in: %v", err)
	}
}

// open loads the console's page (and its #hash state) afresh in ctx's tab.
func (b *browser) open(ctx context.Context, base, pageHash string) {
	b.t.Helper()
	// A query that differs from the last makes it a new document, not a
	// hash change in the same one.
	b.loads++
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/ui/?load=%d#%s", base, b.loads, pageHash))); err != nil {
		b.t.Fatalf("opening the console: %v", err)
	}
}

// forget drops the reported errors that contain text: ones a step
// causes on purpose.
func (b *browser) forget(text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.errors[:0]
	for _, e := range b.errors {
		if !strings.Contains(e, text) {
			kept = append(kept, e)
		}
	}
	b.errors = kept
}

// until evaluates the JavaScript expression js in ctx's tab until it is
// true, failing the test (with what the page shows) after waitFor.
func (b *browser) until(ctx context.Context, what, js string) {
	b.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!(`+js+`)`))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			b.t.Fatalf("%s: not seen after %v (last error %v); the page shows:\n%s", what, waitFor, err, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// eval evaluates js in ctx's tab.
func eval[T any](b *browser, ctx context.Context, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// click clicks the element the CSS selector names.
//
// The click is dispatched on the element found in the same JavaScript
// turn, not at mouse coordinates: the pages redraw every second, and a
// table above the target growing between finding the button and the
// mouse press moved the press onto another element (seen on a busy
// machine: a Drain click that never reached its button).
func (b *browser) click(ctx context.Context, sel string) {
	b.t.Helper()
	q, err := json.Marshal(sel)
	if err != nil {
		b.t.Fatal(err)
	}
	js := `(() => { const e = document.querySelector(` + string(q) + `); if (!e) return false; e.scrollIntoView({block: 'center'}); e.click(); return true; })()`
	for deadline := time.Now().Add(waitFor); ; {
		clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			b.t.Fatalf("clicking %s: %v", sel, err)
		}
		if clicked {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("clicking %s: no such element after %s", sel, waitFor)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// screenshot saves the page as DIR/console-NAME.png when
// SURGE_CONSOLE_SCREENSHOTS=DIR is set (docs/img for docs/CONSOLE.md).
func (b *browser) screenshot(ctx context.Context, name string) {
	b.t.Helper()
	dir := os.Getenv("SURGE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// typeInto types text into the input the CSS selector names.
func (b *browser) typeInto(ctx context.Context, sel, text string) {
	b.t.Helper()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(sel), text)); err != nil {
		b.t.Fatalf("typing into %s: %v", sel, err)
	}
}
