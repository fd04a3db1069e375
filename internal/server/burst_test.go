package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestBurstOnOneAreaIsServedNotRefused: a burst of reservations on one
// area, all in one partition, fits well within a client's patience (the
// server drains it in about a second even on a slow machine), so none of
// it may be refused: every reservation is answered 200, none 429 or 503.
// The partition's admission used to refuse once it predicted 125 ms of
// queue (half the old 250 ms --max-queue-delay default), far below the
// --max-wait patience the waiting room in front of it applies.
func TestBurstOnOneAreaIsServedNotRefused(t *testing.T) {
	burstOnOneArea(t, Config{}, 3000)
}

// burstOnOneArea sends burst reservations on one area at once to a server
// run with cfg and fails unless every one is answered 200.
func burstOnOneArea(t *testing.T, cfg Config, burst int) {
	t.Helper()
	base := serveForTest(t, cfg)
	ev := `{"eventName":"burst","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":100,"colCount":100}]}`
	resp, err := http.Post(base+"/v1/event", "application/json", strings.NewReader(ev))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("creating the event: %s", resp.Status)
	}
	eventID := "burst"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: burst}}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body := fmt.Sprintf(`{"userId":"u%d","eventId":%q,"areaId":"A","numOfSeats":1,"type":"RANDOM"}`, i, eventID)
			st := 0
			if r, err := client.Post(base+"/v1/event/"+eventID+"/reservation", "application/json", strings.NewReader(body)); err == nil {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
				st = r.StatusCode
			}
			mu.Lock()
			statuses[st]++
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if statuses[http.StatusOK] != burst {
		t.Fatalf("answers to a burst of %d reservations on one area, by status (0: no answer): %v; want all 200", burst, statuses)
	}
}
