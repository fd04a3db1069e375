package tracing

import "time"

func timeOf(unixNano int64) time.Time { return time.Unix(0, unixNano) }
