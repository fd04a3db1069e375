package commerce

import (
	"fmt"
	"strings"
)

func validCustomer(email, name, address, phone string) string {
	if msg := validText("email", email, 3, MaxTextLen); msg != "" {
		return msg
	}
	if at := strings.IndexByte(email, '@'); at <= 0 || at == len(email)-1 {
		return "email must look like name@domain"
	}
	for _, t := range [][3]any{{"name", name, 2}, {"address", address, 0}, {"phone", phone, 0}} {
		max := MaxTextLen
		if t[0] == "name" {
			max = 100
		}
		if msg := validText(t[0].(string), t[1].(string), t[2].(int), max); msg != "" {
			return msg
		}
	}
	return ""
}

func (m *Machine) createCustomer(c *CreateCustomer, now int64) *Result {
	if c.ID == "" {
		return invalid("customerId must not be empty")
	}
	if old := m.customers[c.ID]; old != nil {
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("customer %q already exists", c.ID)}
	}
	if msg := validCustomer(c.Email, c.Name, c.Address, c.Phone); msg != "" {
		return invalid("%s", msg)
	}
	cu := &Customer{ID: c.ID, Email: c.Email, Name: c.Name, Address: c.Address, Phone: c.Phone, Status: CustomerActive, CreatedAt: now, UpdatedAt: now}
	m.customers[c.ID] = cu
	m.event(CustomerKey(c.ID), "CustomerCreated", now, "email", c.Email, "name", c.Name, "status", CustomerActive)
	cp := *cu
	return &Result{Outcome: Created, Customer: &cp}
}

func (m *Machine) updateCustomer(c *UpdateCustomer, now int64) *Result {
	cu := m.customers[c.ID]
	if cu == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("customer %q not found", c.ID)}
	}
	if msg := validCustomer(c.Email, c.Name, c.Address, c.Phone); msg != "" {
		return invalid("%s", msg)
	}
	if cu.Email == c.Email && cu.Name == c.Name && cu.Address == c.Address && cu.Phone == c.Phone {
		cp := *cu
		return &Result{Outcome: Same, Customer: &cp}
	}
	cu.Email, cu.Name, cu.Address, cu.Phone, cu.UpdatedAt = c.Email, c.Name, c.Address, c.Phone, now
	m.event(CustomerKey(c.ID), "CustomerUpdated", now, "email", c.Email, "name", c.Name, "address", c.Address, "phone", c.Phone)
	cp := *cu
	return &Result{Outcome: OK, Customer: &cp}
}

func (m *Machine) setCustomerStatus(c *SetCustomerStatus, now int64) *Result {
	cu := m.customers[c.ID]
	if cu == nil {
		return &Result{Outcome: NotFound, Msg: fmt.Sprintf("customer %q not found", c.ID)}
	}
	switch c.Status {
	case CustomerActive, CustomerSuspended, CustomerClosed:
	default:
		return invalid("status must be ACTIVE, SUSPENDED or CLOSED")
	}
	if msg := validText("reason", c.Reason, 0, MaxTextLen); msg != "" {
		return invalid("%s", msg)
	}
	if cu.Status == c.Status {
		cp := *cu
		return &Result{Outcome: Same, Customer: &cp}
	}
	if cu.Status == CustomerClosed {
		return &Result{Outcome: Conflict, Msg: "a CLOSED customer cannot be reopened"}
	}
	m.event(CustomerKey(c.ID), "CustomerStatusChanged", now, "from", cu.Status, "to", c.Status, "reason", c.Reason)
	cu.Status, cu.UpdatedAt = c.Status, now
	cp := *cu
	return &Result{Outcome: OK, Customer: &cp}
}
