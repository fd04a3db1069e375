package engine

// SetShedMinQueue lowers the queue length from which requests are shed by
// delay, so a test can overload a partition with few submitters.
func SetShedMinQueue(o *Options, n int) { o.shedMinQueue = n }
