package engine

// SetShedMinQueue lowers the queue length from which requests are shed by
// delay, so a test can overload a partition with few submitters.
func SetShedMinQueue(o *Options, n int) { o.shedMinQueue = n }

// ObserveBatchBytes has fn told the log bytes of every batch a processor
// commits.
func ObserveBatchBytes(o *Options, fn func(n int)) { o.batchBytes = fn }

// InboxLen is how many requests wait in partition part's inbox.
func InboxLen(e *Engine, part int) int { return len(e.parts[part].inbox) }

// PendingForwards is how many requests wait to be forwarded to part.
func PendingForwards(e *Engine, part int) int {
	f := &e.fwd[part]
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}
