package engine

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// WireTypes is implemented by a Workload whose query and reply values must
// cross between nodes in cluster mode: it lists one value of each concrete
// type that Machine.Query is given or returns and that Effects.Reply is
// given, so that gob can carry them inside an interface.
type WireTypes interface {
	WireTypes() []any
}

// wireValue carries a query, reply or note inside an interface. gob
// cannot carry a nil pointer, slice or map, nor a struct without exported
// fields (empty queries), inside an interface; those travel as the name
// of their type and come back as its zero value.
type wireValue struct {
	V    any
	Zero string
}

// wireTypes maps the names used in wireValue.Zero to types; filled by
// registerWireTypes before any engine serves.
var wireTypes sync.Map // string → reflect.Type

func wireName(t reflect.Type) string { return t.String() }

func registerWire(v any) {
	t := reflect.TypeOf(v)
	if t == nil {
		return
	}
	wireTypes.Store(wireName(t), t)
	// gob can carry every type but a struct without exported fields (a
	// nil sample still registers its type).
	if t.Kind() != reflect.Struct || !zeroOnWire(reflect.ValueOf(v)) {
		gob.Register(v)
	}
}

// zeroOnWire says whether v must travel as the name of its type.
func zeroOnWire(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		return v.IsNil()
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				return false
			}
		}
		return true
	}
	return false
}

func encodeValue(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := encodeWire(gob.NewEncoder(buf), v); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

func encodeWire(enc *gob.Encoder, v any) error {
	w := wireValue{V: v}
	if rv := reflect.ValueOf(v); rv.IsValid() && zeroOnWire(rv) {
		name := wireName(rv.Type())
		if _, ok := wireTypes.Load(name); !ok {
			return fmt.Errorf("type %s is not registered", name)
		}
		w = wireValue{Zero: name}
	}
	return enc.Encode(w)
}

func decodeValue(b []byte) (any, error) {
	return decodeWire(gob.NewDecoder(bytes.NewReader(b)))
}

func decodeWire(dec *gob.Decoder) (any, error) {
	var w wireValue
	if err := dec.Decode(&w); err != nil {
		return nil, err
	}
	if w.Zero != "" {
		t, ok := wireTypes.Load(w.Zero)
		if !ok {
			return nil, fmt.Errorf("type %s is not registered", w.Zero)
		}
		return reflect.Zero(t.(reflect.Type)).Interface(), nil
	}
	return w.V, nil
}

// CheckWireTypes reports the values listed by w.WireTypes that would not
// cross nodes whole: gob leaves out unexported struct fields silently (a
// reply would arrive with them zero), and cannot carry functions or
// channels. Workloads call it from a test.
func CheckWireTypes(w WireTypes) error {
	var errs []error
	for _, v := range w.WireTypes() {
		if v == nil {
			errs = append(errs, errors.New("nil listed in WireTypes"))
			continue
		}
		if err := checkWireType(reflect.TypeOf(v), reflect.TypeOf(v).String(), map[reflect.Type]bool{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var (
	gobEncoderType    = reflect.TypeFor[gob.GobEncoder]()
	binaryMarshalType = reflect.TypeFor[interface{ MarshalBinary() ([]byte, error) }]()
)

func checkWireType(t reflect.Type, path string, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(gobEncoderType) || t.Implements(binaryMarshalType) ||
		reflect.PointerTo(t).Implements(gobEncoderType) || reflect.PointerTo(t).Implements(binaryMarshalType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return checkWireType(t.Elem(), path, seen)
	case reflect.Map:
		if err := checkWireType(t.Key(), path, seen); err != nil {
			return err
		}
		return checkWireType(t.Elem(), path, seen)
	case reflect.Struct:
		var errs []error
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				errs = append(errs, fmt.Errorf("%s: field %s.%s is unexported; gob leaves it out", path, t, f.Name))
				continue
			}
			if err := checkWireType(f.Type, path+"."+f.Name, seen); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return fmt.Errorf("%s: a %s cannot cross nodes", path, t)
	}
	return nil
}

func registerWireTypes(ws map[uint8]Workload) {
	registerWire([]remoteNote{})
	for _, w := range ws {
		if wt, ok := w.(WireTypes); ok {
			for _, v := range wt.WireTypes() {
				registerWire(v)
				// Its nil pointer too, which queries answer for "not found".
				if t := reflect.TypeOf(v); t.Kind() == reflect.Pointer {
					wireTypes.Store(wireName(t), t)
				}
			}
		}
	}
}
