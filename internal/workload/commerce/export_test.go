package commerce

// HoldWaiter takes one of h's places, as a long poll on orderID would,
// until the returned func is called.
func HoldWaiter(h *Hub, orderID string) func() {
	w := h.waiters.AddPoll(orderID)
	return func() { h.waiters.Remove(orderID, w) }
}
