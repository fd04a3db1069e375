package bench

import "net/http"

// The do-nothing server's commerce answers: fixed bodies of the size and
// shape of the real DTOs (docs/API.md), so the generator does
// the same reading and id extraction against both servers. A GET of an
// order answers CONFIRMED, so polls and long polls end at once: against
// this server the saga end-to-end time is the generator's and HTTP's floor.
var (
	nullCustomer = []byte(`{"customerId":"00000000-0000-4000-8000-000000000001","email":"perf@example.com",` +
		`"name":"Perf Customer","address":"1 Load Street","phone":"+1-555-0100","status":"ACTIVE"}`)
	nullProduct = []byte(`{"productId":"00000000-0000-4000-8000-000000000002","sku":"PERF-000",` +
		`"name":"Perf product","description":"load test","price":"19.99","quantityOnHand":100000,` +
		`"quantityReserved":1,"availableQuantity":99999,"category":"perf","status":"ACTIVE"}`)
	nullOrderLines = `"lineItems":[{"productId":"00000000-0000-4000-8000-000000000002","quantity":1,` +
		`"unitPrice":"10.00","productName":"Perf product","sku":"PERF-000"}],"subtotal":"10.00","tax":"1.00","total":"11.00",`
	nullOrderPending = []byte(`{"orderId":"00000000-0000-4000-8000-000000000003","customerId":"00000000-0000-4000-8000-000000000001",` +
		nullOrderLines + `"status":"PENDING","shippingAddress":"1 Load Street",` +
		`"createdAt":"2025-01-01T00:00:00Z","updatedAt":"2025-01-01T00:00:00Z"}`)
	nullOrderConfirmed = []byte(`{"orderId":"00000000-0000-4000-8000-000000000003","customerId":"00000000-0000-4000-8000-000000000001",` +
		nullOrderLines + `"status":"CONFIRMED","shippingAddress":"1 Load Street",` +
		`"createdAt":"2025-01-01T00:00:00Z","updatedAt":"2025-01-01T00:00:00Z"}`)
)

// registerCommerceNull adds the routes `surge bench commerce` drives to the
// do-nothing server's mux; reply builds a handler that discards the request
// body and answers a fixed status and body. The long poll (?wait=) is the
// same GET route and answers at once.
func registerCommerceNull(mux *http.ServeMux, reply func(status int, contentType string, body []byte) http.HandlerFunc) {
	const js = "application/json"
	mux.Handle("POST /api/customers", reply(http.StatusCreated, js, nullCustomer))
	mux.Handle("POST /api/products", reply(http.StatusCreated, js, nullProduct))
	mux.Handle("POST /api/products/{id}/stock/reserve", reply(http.StatusOK, js, nullProduct))
	mux.Handle("POST /api/orders", reply(http.StatusCreated, js, nullOrderPending))
	mux.Handle("GET /api/orders/{id}", reply(http.StatusOK, js, nullOrderConfirmed))
	mux.Handle("GET /actuator/health", reply(http.StatusOK, js, []byte(`{"status":"UP"}`)))
}
