package main

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type seqMessage struct {
	Seq uint64 `json:"seq"`
	ID  string `json:"id"`
}

// TestKill9Sequencer starts `surge serve`, publishes messages to a group
// from several clients (ids make publishing idempotent, so a publish
// retried across the crash cannot make a second message), runs processors
// that lease and complete them over HTTP in any order, kills the server
// with SIGKILL mid-run, restarts it on the same data directory and goes
// on. At the end the group's output must be exactly every acknowledged
// message, each once, at the seq its publish was answered with, in seq
// order with no gap.
func TestKill9Sequencer(t *testing.T) {
	bin, dataDir, addr, srv := startFresh(t)
	defer func() { srv.cmd.Process.Signal(syscall.SIGKILL); srv.cmd.Wait() }()
	client := &http.Client{Timeout: 5 * time.Second}
	base := func() string { return "http://" + addr }
	const total, killAt, batch = 3000, 1000, 10
	group := base() + "/v1/groups/crash"

	var (
		mu    sync.Mutex
		acked = map[string]uint64{}
		next  int
		stop  atomic.Bool
	)
	killed := make(chan struct{})
	var killOnce sync.Once
	var pubs, procs sync.WaitGroup
	for range 4 {
		pubs.Go(func() {
			for {
				mu.Lock()
				k := next
				next += batch
				mu.Unlock()
				if k >= total {
					return
				}
				var ids []string
				var body strings.Builder
				body.WriteString(`{"messages":[`)
				for i := k; i < k+batch; i++ {
					ids = append(ids, fmt.Sprintf("m-%05d", i))
					if i > k {
						body.WriteByte(',')
					}
					fmt.Fprintf(&body, `{"id":"m-%05d","payload":{"i":%d}}`, i, i)
				}
				body.WriteString(`]}`)
				for {
					var res struct {
						Seqs []uint64 `json:"seqs"`
					}
					if st := postJSON(client, "POST", group+"/messages", body.String(), &res); (st == 200 || st == 201) && len(res.Seqs) == batch {
						mu.Lock()
						for i, id := range ids {
							acked[id] = res.Seqs[i]
						}
						n := len(acked)
						mu.Unlock()
						if n >= killAt {
							killOnce.Do(func() { close(killed) })
						}
						break
					}
					// Unanswered (the server is down) or refused: the same
					// ids again.
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	for p := range 3 {
		procs.Go(func() {
			proc := fmt.Sprintf(`"processor":"p%d"`, p)
			for !stop.Load() {
				var res struct {
					Messages []seqMessage `json:"messages"`
				}
				if st := postJSON(client, "POST", group+"/lease", `{`+proc+`,"max":20,"leaseMs":1000,"waitMs":200}`, &res); st != 200 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if len(res.Messages) == 0 {
					continue
				}
				// Complete in reverse order: the output must not care.
				seqs := make([]string, 0, len(res.Messages))
				for i := len(res.Messages) - 1; i >= 0; i-- {
					seqs = append(seqs, fmt.Sprint(res.Messages[i].Seq))
				}
				// A refused or lost complete leaves the messages leased
				// until their lease runs out; then they are leased again.
				postJSON(client, "POST", group+"/complete", `{`+proc+`,"seqs":[`+strings.Join(seqs, ",")+`]}`, nil)
			}
		})
	}
	<-killed
	srv.cmd.Process.Signal(syscall.SIGKILL)
	srv.cmd.Wait()
	mu.Lock()
	t.Logf("killed after %d acknowledged messages", len(acked))
	mu.Unlock()
	srv = startServer(t, bin, dataDir, addr)
	pubs.Wait()

	// Everything is released in the end.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var info struct {
			Position uint64 `json:"position"`
			Last     uint64 `json:"last"`
		}
		if st := getJSON(t, client, group, &info); st == 200 && info.Position == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("released position %d of %d after 60 s (last seq %d)", info.Position, total, info.Last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop.Store(true)
	procs.Wait()

	var out []seqMessage
	for after := uint64(0); ; {
		var page struct {
			Messages []seqMessage `json:"messages"`
			Position uint64       `json:"position"`
		}
		if st := getJSON(t, client, fmt.Sprintf("%s/output?after=%d&limit=1000", group, after), &page); st != 200 {
			t.Fatalf("output after %d: %d", after, st)
		}
		if len(page.Messages) == 0 {
			break
		}
		out = append(out, page.Messages...)
		after = page.Messages[len(page.Messages)-1].Seq
	}
	if len(out) != total {
		t.Fatalf("output holds %d messages, want %d", len(out), total)
	}
	seen := map[string]bool{}
	for i, m := range out {
		if m.Seq != uint64(i+1) {
			t.Fatalf("output[%d] has seq %d: not in order or a gap", i, m.Seq)
		}
		if seen[m.ID] {
			t.Fatalf("message %s released twice", m.ID)
		}
		seen[m.ID] = true
	}
	for id, seq := range acked {
		if !seen[id] {
			t.Errorf("acknowledged message %s (seq %d) is not in the output", id, seq)
		} else if out[seq-1].ID != id {
			t.Errorf("acknowledged message %s at seq %d, but seq %d holds %s", id, seq, seq, out[seq-1].ID)
		}
	}
	if len(acked) != total {
		t.Errorf("%d messages acknowledged, want %d", len(acked), total)
	}
}
