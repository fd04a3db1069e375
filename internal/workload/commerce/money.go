package commerce

import (
	"errors"
	"strconv"
)

// Money is held as integer cents everywhere inside: float arithmetic would
// make 0.1 + 0.2 != 0.3 and a total depend on the order it was summed in.

// MaxMoneyCents bounds any one amount (one hundred million units). With
// MaxQuantity and MaxLineItems it keeps every order total far inside int64.
const MaxMoneyCents int64 = 100_000_000_00

var (
	errMoneySyntax = errors.New("money must be a plain decimal number with at most two decimals, like 12.34")
	errMoneyRange  = errors.New("money must be between 0 and 100000000.00")
)

// ParseMoney reads an amount written as a JSON number or the text of a
// numeric string ("10", "10.5", "10.50") into cents. It is strict on
// purpose: no sign, no exponent, no leading zeros (as JSON numbers), at
// most two decimals (a third would have to be rounded, and rounding a
// price silently is a bug the client should hear about) and at most
// MaxMoneyCents.
func ParseMoney(s string) (int64, error) {
	if s == "" {
		return 0, errMoneySyntax
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart := s[:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return 0, errMoneySyntax
	}
	if len(intPart) > 9 { // more than MaxMoneyCents could hold; also no overflow below
		return 0, errMoneyRange
	}
	units, _ := strconv.ParseInt(intPart, 10, 64)
	var frac int64
	if i < len(s) {
		if s[i] != '.' {
			return 0, errMoneySyntax
		}
		f := s[i+1:]
		if len(f) == 0 || len(f) > 2 {
			return 0, errMoneySyntax
		}
		for _, ch := range []byte(f) {
			if ch < '0' || ch > '9' {
				return 0, errMoneySyntax
			}
			frac = frac*10 + int64(ch-'0')
		}
		if len(f) == 1 {
			frac *= 10
		}
	}
	c := units*100 + frac
	if c > MaxMoneyCents {
		return 0, errMoneyRange
	}
	return c, nil
}

// FormatMoney writes cents as units with exactly two decimals ("12.34",
// "0.05", "-1.50"), the form the compat API answers with.
func FormatMoney(cents int64) string {
	var b [24]byte
	out := b[:0]
	u := uint64(cents)
	if cents < 0 {
		out = append(out, '-')
		u = uint64(-cents) // -MinInt64 wraps to itself, which as uint64 is right
	}
	out = strconv.AppendUint(out, u/100, 10)
	r := u % 100
	out = append(out, '.', byte('0'+r/10), byte('0'+r%10))
	return string(out)
}

// Tax is 10 % of the subtotal, rounded half-up to the cent: 0.05 of a
// cent and above goes up. Subtotals are never negative, so integer
// (subtotal + 5) / 10 is exactly that rounding.
func Tax(subtotalCents int64) int64 { return (subtotalCents + 5) / 10 }
