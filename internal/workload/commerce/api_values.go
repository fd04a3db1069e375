package commerce

import (
	"encoding/json"
	"strconv"
)

// optStr is an optional text field: absent (empty) it is null on the
// wire, as the peer's DTOs send it.
type optStr string

func (s optStr) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(s))
}

// exactMoney is an amount in cents and tenths of a cent: an order's tax
// (10 % of the subtotal) and total written unrounded, with four decimals,
// as the peer writes them (subtotal × 0.10 of two-decimal amounts). What
// is charged is the total rounded to the cent (Order.Total), since
// payments are whole cents.
type exactMoney struct{ cents, tenths int64 }

// exactTax is 10 % of subtotal: never more than one decimal of a cent.
func exactTax(subtotal int64) exactMoney { return exactMoney{subtotal / 10, subtotal % 10} }

// exactTotal is subtotal plus its exact tax.
func exactTotal(subtotal int64) exactMoney {
	return exactMoney{subtotal + subtotal/10, subtotal % 10}
}

func (m exactMoney) MarshalJSON() ([]byte, error) {
	b := strconv.AppendInt(nil, m.cents/100, 10)
	c := m.cents % 100
	return append(b, '.', byte('0'+c/10), byte('0'+c%10), byte('0'+m.tenths), '0'), nil
}
