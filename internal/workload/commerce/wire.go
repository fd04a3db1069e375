package commerce

import "github.com/surge-run/surge/internal/wire"

// In cluster mode replies cross between nodes by gob, which carries only
// exported fields. These types keep some state in unexported fields; the
// methods below say what crosses: what an answer needs (a step's name and
// status), not the machine's bookkeeping (a product's reservations by
// order, which only the owning partition consults).

type sagaStepWire struct {
	Name, Status uint8
	At           int64
}

// GobEncode implements gob.GobEncoder.
func (s SagaStep) GobEncode() ([]byte, error) {
	return wire.GobBytes(sagaStepWire{s.name, s.status, s.At})
}

// GobDecode implements gob.GobDecoder.
func (s *SagaStep) GobDecode(b []byte) error {
	var w sagaStepWire
	if err := wire.FromGob(b, &w); err != nil {
		return err
	}
	*s = SagaStep{name: w.Name, status: w.Status, At: w.At}
	return nil
}

type sagaFields Saga // the exported fields, without the methods

type sagaWire struct {
	S            sagaFields
	Waiting      int
	PaymentAsked bool
	ClosePayment bool
}

// GobEncode implements gob.GobEncoder.
func (s *Saga) GobEncode() ([]byte, error) {
	return wire.GobBytes(sagaWire{sagaFields(*s), s.waiting, s.paymentAsked, s.closePayment})
}

// GobDecode implements gob.GobDecoder.
func (s *Saga) GobDecode(b []byte) error {
	var w sagaWire
	if err := wire.FromGob(b, &w); err != nil {
		return err
	}
	*s = Saga(w.S)
	s.waiting, s.paymentAsked, s.closePayment = w.Waiting, w.PaymentAsked, w.ClosePayment
	return nil
}

type productFields Product

// GobEncode implements gob.GobEncoder: the exported fields only.
func (p *Product) GobEncode() ([]byte, error) { return wire.GobBytes(productFields(*p)) }

// GobDecode implements gob.GobDecoder.
func (p *Product) GobDecode(b []byte) error {
	var w productFields
	if err := wire.FromGob(b, &w); err != nil {
		return err
	}
	*p = Product(w)
	return nil
}
