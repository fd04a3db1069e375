package surge_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGoModIsTidy fails when go.mod or go.sum differ from what `go mod
// tidy` would write, e.g. a direct dependency marked "// indirect", which
// hides what the code really depends on. Fix: run `go mod tidy`. It works
// offline from the module cache (GOPROXY=off) and skips, saying why, when
// the go tool or a module it needs is not available. `go test` puts its
// own GOROOT/bin first on the test's PATH, so PATH is the only place to look.
func TestGoModIsTidy(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go tool on PATH to run `go mod tidy -diff`")
	}
	cmd := exec.Command(goTool, "mod", "tidy", "-diff")
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	switch {
	case err == nil:
	case strings.HasPrefix(stdout.String(), "diff "):
		t.Fatalf("go.mod/go.sum are not tidy; run `go mod tidy`. Difference:\n%s", stdout.String())
	default:
		t.Skipf("skipping: `go mod tidy -diff` could not run offline (modules missing from the cache?): %v\n%s", err, stderr.String())
	}
}
