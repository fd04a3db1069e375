package main

import (
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/testcerts"
)

// The HTTP commands reach a TLS server as the jobs commands do: trusting
// --ca-file, refusing the certificate without it.
func TestCtlOpsOverTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	base := serveTLSInProcess(t, ca)
	if out := ok(t, base, nil, "overview", "--ca-file", ca.File); !strings.Contains(out, "Healthy:  yes") {
		t.Errorf("overview over TLS:\n%s", out)
	}
	if out := ok(t, base, nil, "status", "--ca-file", ca.File); !strings.Contains(out, "Sequencer:  0 groups") {
		t.Errorf("status over TLS:\n%s", out)
	}
	if r := runCtl(t, base, nil, "group", "list"); r.status != 1 || !strings.Contains(r.errMsg, "certificate") {
		t.Errorf("without --ca-file: exit %d, %s; want exit 1 and a certificate error", r.status, r.errMsg)
	}
}
